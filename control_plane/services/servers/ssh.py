"""Servers reached over SSH: adding one, the organization's key the control plane
signs in with, the server's pinned host key, and what the last check found.

The connections themselves are the gateway's (gateway/ssh/): this module is
what they read and record. A host key is pinned at first contact (trust on first
use) unless the operator gave it up front; a different key offered later is kept
aside and stops all contact until an operator accepts it."""

import base64
import datetime as dt
import hashlib
import ipaddress
import re
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from peewee import IntegrityError

from control_plane.infra import clock, secretbox, security
from control_plane.infra.db import database
from control_plane.models import AgentCommand, Organization, OrgSshKey, Server
from control_plane.services import audit
from control_plane.services.servers import registration
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import Conflict, InvalidSshServer, NotFound, Unprocessable

SEAL = "org-ssh-key"
USERNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")  # as registration tokens take it
LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                  "ecdsa-sha2-nistp521", "ssh-rsa")
SSH = states.Connection.SSH


@dataclass(frozen=True)
class Target:
    """What a connection to one server needs."""

    server_id: str
    host: str
    port: int
    username: str
    host_key: str | None  # pinned (an OpenSSH public key line), None before first contact
    refused_key: bool  # a changed key waits for an operator: no contact
    client_key: str  # the organization's private key (OpenSSH PEM)
    configured: bool  # the agent there holds a credential (see `credential_for`)


# --- checks ------------------------------------------------------------------------

def _host(value):
    value = (value or "").strip()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    name = value.rstrip(".")
    if not name or len(name) > 253 or not all(LABEL.fullmatch(p) for p in name.split(".")):
        raise InvalidSshServer("ssh_host must be a host name or an IP address.")
    return name.lower()


def host_key_line(value):
    """An OpenSSH public key line (`type base64 [comment]`) as `type base64`, or 422."""
    parts = (value or "").split()
    try:
        if len(parts) < 2 or parts[0] not in HOST_KEY_TYPES:
            raise ValueError
        serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, TypeError, UnicodeEncodeError):
        raise InvalidSshServer("ssh_host_key must be an OpenSSH public key line, e.g. "
                            "the content of /etc/ssh/ssh_host_ed25519_key.pub.") from None
    return f"{parts[0]} {parts[1]}"


def fingerprint(key_line):
    """As `ssh-keygen -l` shows it: SHA256:base64, unpadded."""
    if not key_line:
        return None
    blob = base64.b64decode(key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _fields(name, provider, ssh_host, ssh_port, ssh_username, ssh_host_key):
    name, provider = (name or "").strip(), (provider or "").strip()
    if not 1 <= len(name) <= 255:
        raise Unprocessable("name must be 1 to 255 characters.")
    if not 1 <= len(provider) <= 64:
        raise Unprocessable("provider must be 1 to 64 characters.")
    if not isinstance(ssh_port, int) or isinstance(ssh_port, bool) or not 1 <= ssh_port <= 65535:
        raise Unprocessable("ssh_port must be an integer from 1 to 65535.")
    if not isinstance(ssh_username, str) or not USERNAME.fullmatch(ssh_username):
        raise Unprocessable("ssh_username must be a user name (letters, digits, _ . -; at most 64).")
    return dict(name=name, provider=provider, ssh_host=_host(ssh_host), ssh_port=ssh_port,
                ssh_username=ssh_username,
                ssh_host_key=host_key_line(ssh_host_key) if ssh_host_key else None)


# --- adding a server -------------------------------------------------------------------

def org_key(org_id):
    """(public key line, private key PEM) of the organization, made on first use."""
    row = OrgSshKey.get_or_none(OrgSshKey.organization == org_id)
    if row is None:
        private = ed25519.Ed25519PrivateKey.generate()
        pem = private.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption()).decode()
        public = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                   serialization.PublicFormat.OpenSSH).decode()
        try:
            with database.atomic():
                row = OrgSshKey.create(organization=org_id, public_key=f"{public} berth",
                                       private_key_sealed=secretbox.seal(pem, SEAL))
        except IntegrityError:  # made meanwhile by another request
            row = OrgSshKey.get(OrgSshKey.organization == org_id)
    return row.public_key, secretbox.unseal(row.private_key_sealed, SEAL)


def _create(org_id, **fields):
    with database.atomic():
        registration.take_slot(org_id)
        return Server.create(organization=org_id, connection=SSH, cpu_cores=0, ram_mb=0,
                             disk_gb=0, **fields)


def create(actor, *, name, provider="byos", ssh_host, ssh_port=22, ssh_username="root",
           ssh_host_key=None):
    """POST /servers, `berth admin server create --ssh-host`: (the server, the
    organization's public key for authorized_keys)."""
    registration.require_registration_access(actor)
    fields = _fields(name, provider, ssh_host, ssh_port, ssh_username, ssh_host_key)
    if Organization.get_or_none(Organization.id == actor.organization_id) is None:
        raise NotFound("organization not found")
    public, _ = org_key(actor.organization_id)
    with database.atomic():
        server = _create(actor.organization_id, **fields)
        audit.record(actor.organization_id, "server.create", "server", server.id, fields)
    return server, public


def wake_check(berth):
    """A new or accepted server is checked now, not at the next turn."""
    if berth.ssh is not None:
        berth.ssh.check_all()


def resident_agent(actor, server_id):
    """POST /servers/{id}/install-agent: the organization's own SSH server, with no
    command in flight (one the switch would cut short). Returns the server."""
    registration.require_registration_access(actor)
    server = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null(),
                                Server.organization == actor.organization_id)
    if server is None:
        raise NotFound("Server not found.")
    if server.connection != SSH:
        raise Conflict("The server already has a resident agent.")
    if AgentCommand.select().where(AgentCommand.server == server.id, AgentCommand.status.in_(
            (*states.COMMAND_UNDELIVERED, states.CommandStatus.ACKED))).exists():
        raise Conflict("Tasks are running on the server; install the agent once they end.")
    return server


def switch_to_agent(server_id):
    """The server's resident agent is installed: it is reached through the gateway."""
    Server.update(connection=states.Connection.AGENT, unreachable_since=None,
                  ssh_error=None).where(Server.id == server_id).execute()


def accept_host_key(actor, server_id):
    """Someone's word that the key the server now offers is its own: POST
    /servers/{id}/accept-host-key (the organization's own SSH server), or `berth
    admin server accept-host-key` (any)."""
    registration.require_registration_access(actor)
    org_id = actor.organization_id
    with database.atomic():
        server = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null(),
                                    Server.connection == SSH,
                                    *([Server.organization == org_id] if org_id else []))
        if server is None:
            raise NotFound("SSH server not found.")
        if not server.ssh_offered_host_key:
            raise Conflict("The server has offered no other host key.")
        Server.update(ssh_host_key=server.ssh_offered_host_key, ssh_offered_host_key=None,
                      ssh_error=None).where(Server.id == server.id).execute()
        return server.ssh_offered_host_key


# --- what connections read and record ------------------------------------------------------

def target(server_id):
    """The Target of an SSH server, or None (an agent server, deleted, unknown)."""
    server = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null(),
                                Server.connection == SSH)
    if server is None or server.organization_id is None:
        return None
    _, private = org_key(server.organization_id)
    return Target(str(server.id), server.ssh_host, server.ssh_port, server.ssh_username,
                  server.ssh_host_key, bool(server.ssh_offered_host_key), private,
                  server.agent_credential_hash is not None)


def is_ssh(server_id):
    return Server.select().where(Server.id == server_id, Server.connection == SSH).exists()


def ssh_server_ids(claim_for=None):
    """The SSH servers; with `claim_for` (seconds, the scheduler's interval), only
    those this caller claims: one not claimed within most of that time, each by
    one conditional UPDATE, so of several schedulers one checks it."""
    ids = [str(i) for (i,) in Server.select(Server.id).where(
        Server.connection == SSH, Server.deleted_at.is_null()).tuples()]
    if claim_for is None:
        return ids
    now = clock.now()
    stale = now - dt.timedelta(seconds=claim_for * 0.8)
    with database.atomic():
        return [i for i in ids if Server.update(ssh_claimed_at=now).where(
            Server.id == i, Server.ssh_claimed_at.is_null() | (Server.ssh_claimed_at < stale),
        ).execute()]


def pin_host_key(server_id, key_line):
    """First contact: the key the server offered becomes its own (if none is yet)."""
    return Server.update(ssh_host_key=key_line).where(
        Server.id == server_id, Server.ssh_host_key.is_null()).execute() == 1


def host_key_changed(server_id, offered):
    Server.update(ssh_offered_host_key=offered, ssh_error=(
        f"the server's host key changed (now {fingerprint(offered)}): all contact is "
        "stopped until an operator accepts the new key")).where(Server.id == server_id).execute()


def host_key_refusal(server_id):
    """What a read refused for a changed host key answers: the key the server now
    offers, and the ways to accept it (retrying cannot help)."""
    offered = Server.select(Server.ssh_offered_host_key).where(Server.id == server_id).scalar()
    now = f" (it now offers {fingerprint(offered)})" if offered else ""
    return (f"The server's SSH host key changed{now}: nothing is sent to it until the new "
            f"key, once checked on the server, is accepted with POST /api/public/v1/servers/"
            f"{server_id}/accept-host-key or `berth admin server accept-host-key {server_id}`.")


def new_credential():
    """A fresh agent credential (the server's backups sign in to the transfer API
    with it): the caller writes it to the server's configuration over SSH, then
    `keep_credential` stores its digest."""
    return registration.CREDENTIAL_PREFIX + security.random_token(40)


def keep_credential(server_id, credential):
    Server.update(agent_credential_hash=security.digest(credential)).where(
        Server.id == server_id).execute()


def record_check(server_id, *, error=None, facts=None):
    """The outcome of one check: reachable (with the host's facts) or not, and why."""
    now = clock.now()
    fields = {Server.ssh_checked_at: now, Server.ssh_error: error[:500] if error else None}
    if error is None:
        fields[Server.unreachable_since] = None
        fields[Server.last_seen_at] = now
        for name in ("cpu_cores", "ram_mb", "disk_gb", "hostname", "agent_version"):
            value = (facts or {}).get(name)
            if value:
                fields[getattr(Server, name)] = value
    with database.atomic():
        Server.update(fields).where(Server.id == server_id).execute()
        if error is not None:
            Server.update(unreachable_since=now).where(
                Server.id == server_id, Server.unreachable_since.is_null()).execute()
