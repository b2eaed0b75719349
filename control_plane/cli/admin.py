"""`berth admin …`: operator commands. Each prints exactly one JSON object on
stdout and exits 0; on error, a message on stderr and exit code 1."""

import datetime as dt
import functools
import getpass
import json
import os
import sys
import uuid

import click

from control_plane.cli import cli, make_app
from control_plane.inputs import safe_input
from control_plane.models.org import PERMISSIONS, USER_ACCESS
from control_plane.services import audit
from control_plane.vocabulary.errors import ApiError
from control_plane.vocabulary.states import TicketStatus


@cli.group()
def admin():
    """Operator commands (JSON output)."""


def command(group, name=None):
    """A JSON-printing admin command: the database is migrated first; domain
    errors become a message on stderr and exit code 1."""

    def decorate(fn):
        @functools.wraps(fn)
        def run(**kwargs):
            from control_plane.infra import migrate

            app = make_app()
            migrate.upgrade(app.extensions["berth"].db)
            try:
                for name, value in kwargs.items():  # argv bytes not UTF-8: lone surrogates
                    for text in value if isinstance(value, tuple) else (value,):
                        if isinstance(text, str):
                            safe_input.check_text(text, f"--{name.replace('_', '-')}")
                with app.app_context(), audit.acting(_operator()):
                    result = fn(**kwargs)
            except ApiError as exc:
                click.echo(f"error: {exc.message}", err=True)
                sys.exit(1)
            click.echo(json.dumps(result, default=str))

        return group.command(name)(run)

    return decorate


def _operator():
    """Who an admin command's changes are (services/audit.py): the account that ran
    it, or the one sudo was run from."""
    return audit.Actor("operator", os.environ.get("SUDO_USER") or getpass.getuser(), None,
                       "local", None)


class UUIDParam(click.ParamType):
    name = "UUID"

    def convert(self, value, param, ctx):
        try:
            return uuid.UUID(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a UUID", param, ctx)


UUID_T = UUIDParam()


def operator():
    """Who is asking, for the services an operator's command calls: `berth admin`."""
    from control_plane.services.accounts import actors

    return actors.OPERATOR


def _iso(value):
    return None if value is None else value.isoformat() + "Z"


# --- organizations, users ----------------------------------------------------

@admin.group()
def org():
    """Organizations."""


@command(org, "create")
@click.option("--name", required=True)
@click.option("--server-quota", type=click.IntRange(min=0), default=10, show_default=True)
def org_create(name, server_quota):
    from control_plane.services.accounts import orgs

    o = orgs.create_org(name, server_quota)
    return {"id": str(o.id), "name": o.name, "server_quota": o.server_quota}


@admin.group()
def user():
    """Users of the deployment-operations surface."""


@command(user, "create")
@click.option("--org", "org_id", type=UUID_T, required=True)
@click.option("--name", required=True)
@click.option("--email", required=True)
@click.option("--permission", "permissions", multiple=True, type=click.Choice(PERMISSIONS))
@click.option("--access", type=click.Choice(USER_ACCESS), default="full_access", show_default=True,
              help="What the user may do in the web console.")
def user_create(org_id, name, email, permissions, access):
    from control_plane.services.accounts import orgs

    u = orgs.create_user(org_id, name, email, permissions, access=access)
    return {"id": str(u.id), "name": u.name, "email": u.email, "permissions": u.permissions}


@command(user, "password")
@click.argument("user_id", type=UUID_T)
@click.option("--generate", is_flag=True,
              help="Make a password and print it this once (else it is read from stdin).")
def user_password(user_id, generate):
    """The user's web console password: read from stdin (never argv), or made here.
    Every session of the user ends."""
    from control_plane.services.accounts import sessions

    password = sessions.new_password() if generate else _password_from_stdin()
    _, ended = sessions.set_password(user_id, password)
    return {"id": str(user_id), "sessions_ended": ended,
            **({"password": password} if generate else {})}


def _password_from_stdin():
    if sys.stdin.isatty():
        return click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True)
    return sys.stdin.readline().rstrip("\r\n")


@command(user, "access")
@click.argument("user_id", type=UUID_T)
@click.argument("access", type=click.Choice(USER_ACCESS))
def user_access(user_id, access):
    from control_plane.services.accounts import sessions

    u = sessions.set_access(user_id, access)
    return {"id": str(u.id), "access": u.access}


@command(user, "totp-off")
@click.argument("user_id", type=UUID_T)
def user_totp_off(user_id):
    """Turns the user's second factor off (a lost device)."""
    from control_plane.services.accounts import sessions

    sessions.totp_reset(user_id)
    return {"id": str(user_id), "totp": False}


@command(user, "sign-out")
@click.argument("user_id", type=UUID_T)
def user_sign_out(user_id):
    """Ends every web console session of the user."""
    from control_plane.services.accounts import sessions

    return {"id": str(user_id), "sessions_ended": sessions.end_all_sessions(user_id)}


@command(user, "token")
@click.argument("user_id", type=UUID_T)
def user_token(user_id):
    from control_plane.services.accounts import orgs

    return {"token": orgs.issue_user_token(user_id)}


@command(user, "delete")
@click.argument("user_id", type=UUID_T)
def user_delete(user_id):
    from control_plane.services.accounts import orgs

    orgs.delete_user(user_id)
    return {"deleted": True}


@command(admin, "bootstrap")
def bootstrap():
    """First organization, a full-access key and a first console user (all permissions,
    a generated password), if there is no organization yet."""
    from control_plane.services.accounts import orgs

    made = orgs.bootstrap()
    if made is None:
        return {"created": False}
    o, key, raw, first, password = made
    click.echo(f"Created organization {o.id}; its full-access API key and the password of "
               f"its first console user ({first.email}) are in the JSON below and are shown "
               "only this once.", err=True)
    return {"created": True, "organization_id": str(o.id), "key_id": key.public_id, "key": raw,
            "user_id": str(first.id), "email": first.email, "password": password}


# --- API keys ----------------------------------------------------------------

@admin.group()
def key():
    """API keys of the public API."""


def _parse_expiry(value):
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(f"--expires-at {value!r} is not ISO 8601") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    return when


@command(key, "create")
@click.option("--org", "org_id", type=UUID_T, required=True)
@click.option("--name", required=True)
@click.option("--type", "key_type", type=click.Choice(["read_only", "full_access"]), required=True)
@click.option("--scope", type=click.Choice(["organization", "project"]), required=True)
@click.option("--project", "project_id", type=UUID_T)
@click.option("--expires-at")
@click.option("--server-registration", is_flag=True)
@click.option("--support-tickets", is_flag=True)
@click.option("--owner", "owner_id", type=UUID_T)
def key_create(org_id, name, key_type, scope, project_id, expires_at, server_registration,
               support_tickets, owner_id):
    from control_plane.services.accounts import keys

    k, raw = keys.create_key(org_id, name, key_type, scope, project_id, _parse_expiry(expires_at),
                             server_registration, support_tickets, owner_id)
    return {"id": k.public_id, "key": raw, "type": k.key_type, "scope": k.scope}


@command(key, "list")
@click.option("--org", "org_id", type=UUID_T, required=True)
def key_list(org_id):
    from control_plane.services.accounts import keys

    return {"keys": [{"id": k.public_id, "name": k.name, "prefix": k.prefix, "type": k.key_type,
                      "scope": k.scope, "status": keys.status_of(k),
                      "expires_at": _iso(k.expires_at)} for k in keys.list_keys(org_id)]}


@command(key, "revoke")
@click.argument("key_id")
def key_revoke(key_id):
    from control_plane.services.accounts import keys

    keys.revoke_key(key_id)
    return {"revoked": True}


@command(key, "delete")
@click.argument("key_id")
def key_delete(key_id):
    """Remove a revoked or expired key from the list."""
    from control_plane.services.accounts import keys

    keys.delete_key(key_id)
    return {"deleted": True}


# --- servers, tickets, releases ----------------------------------------------

@admin.group()
def server():
    """Servers (customer-owned or shared)."""


@command(server, "create")
@click.option("--name", required=True)
@click.option("--provider", required=True)
@click.option("--region")
@click.option("--cpu-cores", type=int, help="Required unless --ssh-host (then read from it).")
@click.option("--ram-mb", type=int)
@click.option("--disk-gb", type=int)
@click.option("--org", "org_id", type=UUID_T)
@click.option("--shared", is_flag=True)
@click.option("--ssh-host", help="Reach the server over SSH at this host (no resident agent).")
@click.option("--ssh-port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--ssh-username", default="root", show_default=True)
@click.option("--ssh-host-key", help="Its host key (an OpenSSH public key line), pinned now; "
              "default: the key it offers at first contact.")
def server_create(name, provider, region, cpu_cores, ram_mb, disk_gb, org_id, shared, ssh_host,
                  ssh_port, ssh_username, ssh_host_key):
    from control_plane.services.servers import servers, ssh

    if (org_id is None) == (not shared):
        raise ApiError("give exactly one of --org ORG_ID and --shared")
    if ssh_host is not None:
        if shared:
            raise ApiError("a server reached over SSH belongs to an organization: use --org")
        from control_plane.services.accounts import actors

        s, public = ssh.create(actors.operator(org_id), name=name, provider=provider,
                               ssh_host=ssh_host, ssh_port=ssh_port, ssh_username=ssh_username,
                               ssh_host_key=ssh_host_key)
        return {"id": str(s.id), "name": s.name, "provider": s.provider, "connection": "ssh",
                "ssh_host": s.ssh_host, "ssh_port": s.ssh_port, "ssh_username": s.ssh_username,
                "host_key_fingerprint": ssh.fingerprint(s.ssh_host_key),
                "organization_id": str(org_id), "ssh_public_key": public}
    if None in (cpu_cores, ram_mb, disk_gb):
        raise ApiError("give --cpu-cores, --ram-mb and --disk-gb (or --ssh-host)")
    s = servers.create_server(name=name, provider=provider, region=region, cpu_cores=cpu_cores,
                              ram_mb=ram_mb, disk_gb=disk_gb, org_id=org_id)
    return {"id": str(s.id), "name": s.name, "provider": s.provider, "region": s.region,
            "cpu_cores": s.cpu_cores, "ram_mb": s.ram_mb, "disk_gb": s.disk_gb,
            "organization_id": str(org_id) if org_id else None, "shared": shared,
            "connection": "agent"}


@command(server, "accept-host-key")
@click.argument("server_id", type=UUID_T)
def server_accept_host_key(server_id):
    """Accept the host key an SSH server now offers (check its fingerprint first)."""
    from control_plane.services.servers import ssh

    accepted = ssh.accept_host_key(operator(), server_id)
    return {"id": str(server_id), "host_key_fingerprint": ssh.fingerprint(accepted)}


@command(server, "install-agent")
@click.argument("server_id", type=UUID_T)
def server_install_agent(server_id):
    """Install the resident agent on an SSH server (waits for the install)."""
    from flask import current_app as app

    from control_plane.models import Server

    row = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null())
    if row is None or row.connection != "ssh":
        raise ApiError("no server reached over SSH has that id")
    future = app.extensions["berth"].ssh.install_resident(server_id)
    try:
        future.result(app.config["SSH_INSTALL_TIMEOUT"] + 60)
    except Exception as exc:  # recorded on the server by the link
        raise ApiError(f"installing the resident agent failed: {exc}") from None
    return {"id": str(server_id), "connection": Server.get_by_id(server_id).connection}


@admin.group()
def agents():
    """Resident agents: their versions, and upgrades to this control plane's."""


@command(agents, "list")
def agents_list():
    """Each server's agent version, whether it is behind, and its latest upgrade."""
    from control_plane.services.servers import upgrades

    return upgrades.listing()


@command(agents, "upgrade")
@click.option("--server", "server_ids", type=UUID_T, multiple=True,
              help="This server's agent (repeatable).")
@click.option("--all", "every", is_flag=True, help="Every server's agent that is behind.")
def agents_upgrade(server_ids, every):
    """Upgrade agents to this control plane's version: at most
    CP_AGENT_UPGRADE_CONCURRENCY restart at once; each rolls back by itself if its
    new version does not connect within CP_AGENT_UPGRADE_TIMEOUT seconds."""
    from control_plane.services.servers import upgrades

    if bool(server_ids) == every:
        raise click.UsageError("give --server ID (one or more) or --all")
    return upgrades.request(None if every else server_ids)


@admin.group()
def ticket():
    """Support tickets (staff side)."""


@command(ticket, "create")
@click.option("--org", "org_id", type=UUID_T, required=True)
@click.option("--subject", required=True)
@click.option("--description", required=True)
@click.option("--status", default=TicketStatus.OPEN.value, show_default=True)
@click.option("--priority", default="normal", show_default=True)
@click.option("--category", default="general", show_default=True)
@click.option("--project", "project_id", type=UUID_T)
@click.option("--environment", "environment_id", type=UUID_T)
@click.option("--server", "server_id", type=UUID_T)
def ticket_create(**kwargs):
    from control_plane.services.support import tickets

    t = tickets.create_ticket(**kwargs)
    return {"id": str(t.id), "ticket_number": t.ticket_number}


@command(ticket, "comment")
@click.argument("ticket_id", type=UUID_T)
@click.option("--author", required=True)
@click.option("--content", required=True)
@click.option("--from-support", is_flag=True)
@click.option("--internal", is_flag=True, help="An internal note: never shown to the customer")
def ticket_comment(ticket_id, author, content, from_support, internal):
    from control_plane.services.support import tickets

    c = tickets.add_comment(ticket_id, author=author, content=content,
                            from_support=from_support, internal=internal)
    return {"id": str(c.id)}


@admin.group()
def release():
    """Release notes."""


@command(release, "add")
@click.option("--version", required=True)
@click.option("--date", required=True)
@click.option("--title", required=True)
@click.option("--highlight", "highlights", multiple=True)
@click.option("--added", multiple=True)
@click.option("--changed", multiple=True)
@click.option("--improved", multiple=True)
@click.option("--fixed", multiple=True)
def release_add(version, date, title, highlights, added, changed, improved, fixed):
    from control_plane.services.support import releases

    r = releases.add_release(version=version, date=date, title=title, highlights=highlights,
                             categories={"added": added, "changed": changed,
                                         "improved": improved, "fixed": fixed})
    return {"version": r.version}
