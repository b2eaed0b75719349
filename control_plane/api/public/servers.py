"""Servers: /servers."""

import marshmallow as ma
from flask import request
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor, key_checked_by_page
from control_plane.api.fields import Name, Schema, UTCDateTime
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint
from control_plane.services import agents
from control_plane.services.servers import servers as svc
from control_plane.services.servers import ssh as ssh_svc
from control_plane.vocabulary.states import Connection

blp = Blueprint("servers", __name__, description="Servers")


_DATE = UTCDateTime()


def _iso(value):
    return _DATE._serialize(value, None, None)


def _unreachable_since(row):
    """SSH: since the first failed check. Agent: its last heartbeat, once it is not connected."""
    if row["connection"] == Connection.SSH:
        return row["unreachable_since"]
    return None if svc.reachable(row) else row["last_seen_at"]


class SshSchema(Schema):
    host = ma.fields.String(required=True, attribute="ssh_host")
    port = ma.fields.Integer(required=True, attribute="ssh_port")
    username = ma.fields.String(required=True, attribute="ssh_username")
    host_key_fingerprint = ma.fields.Function(
        lambda row: ssh_svc.fingerprint(row["ssh_host_key"]), allow_none=True, metadata={
            "description": "The pinned host key (SHA256, as ssh-keygen -l shows it); null "
                           "until first contact."})
    offered_host_key_fingerprint = ma.fields.Function(
        lambda row: ssh_svc.fingerprint(row["ssh_offered_host_key"]), allow_none=True, metadata={
            "description": "A different key the server offered: all contact is stopped "
                           "until it is accepted (POST /servers/{id}/accept-host-key)."})
    checked_at = UTCDateTime(allow_none=True, attribute="ssh_checked_at")
    error = ma.fields.String(allow_none=True, attribute="ssh_error",
                             metadata={"description": "Why the last check failed."})


class ServerSchema(Schema):
    id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    provider = ma.fields.String(required=True)
    region = ma.fields.String(allow_none=True)
    cpu_cores = ma.fields.Integer(required=True)
    ram_mb = ma.fields.Integer(required=True)
    disk_gb = ma.fields.Integer(required=True)
    environment_count = ma.fields.Integer(required=True)
    # Beyond the spec: whether the server's agent holds its stream now, and when it
    # was last heard from (null: no agent has ever connected).
    connected = ma.fields.Function(
        lambda row: agents.connected(row["connected_since"], row["last_seen_at"]), required=True,
        metadata={"description": "The server's agent holds its stream now (false for a "
                                 "server reached over SSH: see `reachable`)."})
    last_seen_at = UTCDateTime(allow_none=True, metadata={
        "description": "The agent's last heartbeat (or the last answered SSH check); null "
                       "if never."})
    connection = ma.fields.String(required=True, metadata={
        "description": "How the control plane reaches the server: `agent` (a resident "
                       "agent's stream) or `ssh`."})
    reachable = ma.fields.Function(svc.reachable, required=True, metadata={
        "description": "Agent: its stream is held now. SSH: the last check answered."})
    unreachable_since = ma.fields.Function(
        lambda row: _iso(_unreachable_since(row)), allow_none=True,
        metadata={"description": "Since when the server has not been reachable; null "
                                 "when it is (or was never reached)."})
    agent_version = ma.fields.String(allow_none=True, metadata={
        "description": "The berth-agent version the server last reported."})
    agent_behind = ma.fields.Function(
        lambda row: agents.behind(row["agent_version"]), allow_none=True, metadata={
            "description": "Whether that agent is older than this control plane's (null "
                           "when no agent ever reported)."})
    ssh = ma.fields.Function(lambda row: SshSchema().dump(row)
                             if row["connection"] == Connection.SSH else None,
                             allow_none=True, metadata={"description": "SSH servers only."})


ServerPage = cursor_page_schema(ServerSchema, "ServerPage")


class SshServerCreateSchema(ma.Schema):
    name = Name(required=True)
    provider = ma.fields.String(load_default="byos", validate=ma.validate.Length(1, 64))
    ssh_host = ma.fields.String(required=True, validate=ma.validate.Length(1, 253), metadata={
        "description": "Host name or IP address the control plane connects to."})
    ssh_port = ma.fields.Integer(load_default=22, validate=ma.validate.Range(1, 65535))
    ssh_username = ma.fields.String(load_default="root", validate=[
        ma.validate.Length(1, 64),
        ma.validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_.-]*$", error="Not a valid user name.")])
    ssh_host_key = ma.fields.String(load_default=None, allow_none=True, validate=(
        ma.validate.Length(max=16384)), metadata={
        "description": "The server's host key (an OpenSSH public key line), pinned now; "
                       "default: the key it offers at first contact."})


class SshServerCreatedSchema(ServerSchema):
    ssh_public_key = ma.fields.String(required=True, metadata={
        "description": "The organization's key: add it to the user's authorized_keys."})


@blp.before_request
def require_access():
    # Before the body is read: a key that may not add servers learns nothing from
    # validation errors (as for registration tokens).
    if request.method == "POST":
        ssh_svc.registration.require_registration_access(current_actor())


@blp.route("/servers")
class Servers(MethodView):
    @key_checked_by_page
    @blp.arguments(CursorArgs, location="query")
    @blp.response(200, ServerPage)
    def get(self, args):
        """Servers available to the organization: its own and shared ones (oldest first)."""
        rows, meta = svc.list_servers(current_actor(), **args)
        return {"data": rows, "pagination": meta}

    @blp.arguments(SshServerCreateSchema)
    @blp.response(201, SshServerCreatedSchema)
    def post(self, body):
        """Add a server reached over SSH (org-scoped, full-access key with server
        registration). The answer carries the key to put in its authorized_keys."""
        actor = current_actor()
        server, public = ssh_svc.create(actor, **body)
        ssh_svc.wake_check(current_berth())
        return {**svc.one(actor, server.id), "ssh_public_key": public}


@blp.route("/servers/<uuid:server_id>/accept-host-key")
class AcceptHostKey(MethodView):
    @blp.response(200, ServerSchema)
    def post(self, server_id):
        """Accept the host key an SSH server now offers in place of its pinned one
        (after checking its fingerprint on the server): contact resumes."""
        actor = current_actor()
        ssh_svc.accept_host_key(actor, server_id)
        ssh_svc.wake_check(current_berth())
        return svc.one(actor, server_id)


@blp.route("/servers/<uuid:server_id>/install-agent")
class InstallAgent(MethodView):
    @blp.response(202, ServerSchema)
    def post(self, server_id):
        """Install the resident agent on a server reached over SSH: over the SSH
        connection, from this control plane's packages, with its service started.
        Then the server is reached through its agent (`connection`: `agent`, once
        the install is done; a failure shows in `ssh.error`)."""
        actor = current_actor()
        server = ssh_svc.resident_agent(actor, server_id)
        current_berth().ssh.install_resident(server.id)
        return svc.one(actor, server.id)
