"""Registration tokens: how a customer adds a server.

A token is created through the API (org-scoped, full-access key with the server
registration capability), shown once, and reserves one slot of the
organization's server quota while it is pending. The agent trades it, once, for
a Server and its own credential (`consume_token`, called by the gateway).

Its statuses and moves are `states.TokenStatus` and `states.REGISTRATION_TOKEN`;
each move is one conditional UPDATE whose WHERE clause the table gives."""

import datetime as dt

from peewee import fn

from control_plane.infra import clock, security
from control_plane.infra.db import database, for_update
from control_plane.models import Organization, Project, RegistrationToken, Server, User
from control_plane.services import audit
from control_plane.services.accounts.scope import require_org_scope
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import (
    InvalidFacts,
    NotFound,
    ServerQuotaExceeded,
    ServerRegistrationNotEnabled,
    TokenConsumed,
    TokenExpired,
    TokenInvalid,
    TokenRevoked,
    Unprocessable,
    WriteAccessRequired,
)

TOKEN_PREFIX = "srt_live_"
CREDENTIAL_PREFIX = "agt_live_"
SHOWN_PREFIX_LENGTH = 17  # "srt_live_" and 8 random characters
PROVIDER = "byos"  # bring your own server
EXPIRY_CHOICES = {
    "1h": dt.timedelta(hours=1),
    "6h": dt.timedelta(hours=6),
    "24h": dt.timedelta(hours=24),
    "48h": dt.timedelta(hours=48),
    "7d": dt.timedelta(days=7),
}
PENDING, CONSUMED, REVOKED, EXPIRED = (states.TokenStatus.PENDING, states.TokenStatus.CONSUMED,
                                       states.TokenStatus.REVOKED, states.TokenStatus.EXPIRED)
MAX_FACT = 2**31 - 1  # the columns are 32-bit integers


# --- access ----------------------------------------------------------------

def require_registration_access(actor, *, write=True):
    """The spec's order: read-only, then project scope, then the capability."""
    if write and actor.read_only:
        raise WriteAccessRequired()
    require_org_scope(actor, "Server registration needs an organization-scoped actor.")
    if not actor.server_registration:
        raise ServerRegistrationNotEnabled("Server registration is not enabled for this actor.")


# --- API operations ----------------------------------------------------------

def status_of(token, now=None):
    if token.status == PENDING and token.expires_at <= (now or clock.now()):
        return EXPIRED
    return token.status


def _created_by(actor):
    """The owner's name (a key's owner, the user); a key without an owner (an
    operator's key) signs with its own name."""
    if actor.owner_id is not None:
        owner = User.get_or_none(User.id == actor.owner_id)
        if owner is not None:
            return actor.owner_id, owner.name
    return None, actor.name


def _auto_deploy(actor, auto_deploy):
    """Stored as plain JSON; the project must be one of the organization's active projects."""
    if auto_deploy is None:
        return None
    project_id = auto_deploy["project_id"]
    if not Project.select().where(Project.id == project_id,
                                  Project.organization == actor.organization_id,
                                  Project.deleted_at.is_null()).exists():
        raise NotFound("Project not found.")
    return {
        "project_id": str(project_id),
        "environment_name": auto_deploy.get("environment_name", "production"),
        "environment_type": auto_deploy.get("environment_type", "production"),
        "branch": auto_deploy.get("branch"),
    }


def _slots_used(org_id, now):
    """Live servers plus pending, unexpired tokens, read in one statement (one
    snapshot), so a token being consumed concurrently is counted exactly once."""
    servers = Server.select(fn.COUNT(Server.id)).where(
        Server.organization == org_id, Server.deleted_at.is_null())
    tokens = RegistrationToken.select(fn.COUNT(RegistrationToken.id)).where(
        RegistrationToken.organization == org_id, RegistrationToken.status == PENDING,
        RegistrationToken.expires_at > now)
    row = Organization.select(servers.alias("servers"), tokens.alias("tokens")).where(
        Organization.id == org_id).tuples().get()
    return row[0] + row[1]


def take_slot(org_id):
    """(Inside the caller's transaction.) The organization, locked, when a server or
    a pending token may still be added: creations of one organization queue on its
    row, so the count cannot be raced past the quota."""
    org = for_update(Organization.select().where(Organization.id == org_id)).get()
    if _slots_used(org.id, clock.now()) >= org.server_quota:
        raise ServerQuotaExceeded(f"The server quota ({org.server_quota}) is used up, "
                                  "counting pending registration tokens. Revoke an "
                                  "unused token or remove a server.")
    return org


def create_token(actor, *, server_name=None, ssh_username="root", expires_in="24h",
                 auto_deploy=None):
    """Returns (RegistrationToken, raw token). The raw token exists only in this return value."""
    require_registration_access(actor)
    if expires_in not in EXPIRY_CHOICES:
        raise Unprocessable(f"expires_in must be one of {', '.join(EXPIRY_CHOICES)}.")
    with database.atomic():
        org = take_slot(actor.organization_id)
        auto_deploy = _auto_deploy(actor, auto_deploy)
        now = clock.now()
        created_by, created_by_name = _created_by(actor)
        raw = TOKEN_PREFIX + security.random_token(40)
        token = RegistrationToken.create(
            organization=org, token_hash=security.digest(raw),
            token_prefix=raw[:SHOWN_PREFIX_LENGTH],
            server_name=server_name.strip() if server_name else None,
            ssh_username=ssh_username, auto_deploy=auto_deploy,
            status=states.check("registration_token", None, PENDING),
            expires_at=now + EXPIRY_CHOICES[expires_in], created_by=created_by,
            created_by_name=created_by_name, created_at=now)
        audit.record(actor.organization_id, "registration_token.create", "registration_token",
                     token.id, {"server_name": token.server_name, "ssh_username": ssh_username,
                                "expires_in": expires_in, "auto_deploy": auto_deploy})
    return token, raw


def list_tokens(actor):
    """All of the organization's tokens, newest first, each with its current status."""
    require_registration_access(actor, write=False)
    now = clock.now()
    tokens = list(RegistrationToken.select().where(
        RegistrationToken.organization == actor.organization_id)
        .order_by(RegistrationToken.created_at.desc(), RegistrationToken.id.desc()))
    for token in tokens:
        token.status = status_of(token, now)
    return tokens


def revoke_token(actor, token_id):
    """pending -> revoked, which frees its quota slot. Revoking a token that is
    already revoked or expired changes nothing and succeeds; a consumed,
    missing or foreign token is 404."""
    require_registration_access(actor)
    with database.atomic():
        now = clock.now()
        changed = RegistrationToken.update(status=REVOKED, revoked_at=now).where(
            RegistrationToken.id == token_id,
            RegistrationToken.organization == actor.organization_id,
            RegistrationToken.status.in_(states.sources("registration_token", REVOKED)),
            RegistrationToken.expires_at > now).execute()
        if changed:
            audit.record(actor.organization_id, "registration_token.revoke", "registration_token",
                         token_id)
            return
        token = RegistrationToken.get_or_none(
            RegistrationToken.id == token_id,
            RegistrationToken.organization == actor.organization_id)
        if token is None or token.status == CONSUMED:
            raise NotFound("Registration token not found.")


def _quote(value):
    return "'" + value.replace("'", "'\\''") + "'"


def install_command(public_url, raw_token):
    """The line a customer pastes on the new server: downloads the installer to a
    temporary file (a failed or cut-off download stops here, with an error) and
    runs it as root, or through sudo. The token goes through a pipe from the
    shell's builtin printf to the installer's standard input: it is in no
    command line (`sudo VAR=… sh` would show it to every user in `ps`), and the
    installer hands it on to `berth-agent register` on stdin again."""
    base = public_url.rstrip("/")
    token, env = _quote(raw_token), f"BERTH_CONTROL_PLANE={_quote(base)}"
    return (f"""(f=$(mktemp) && trap 'rm -f "$f"' EXIT && """
            f"""curl -fsSL {_quote(base + '/install.sh')} -o "$f" && """
            f"""if [ "$(id -u)" -eq 0 ]; then printf '%s\\n' {token} | {env} sh "$f"; """
            f"""else printf '%s\\n' {token} | sudo {env} sh "$f"; fi)""")


# --- agent side -----------------------------------------------------------------

def _facts(hostname, cpu_cores, ram_mb, disk_gb, server_name):
    hostname = (hostname or "").strip()[:255]
    if not hostname:
        raise InvalidFacts("The agent reported no hostname.")
    for label, value, low in (("cpu_cores", cpu_cores, 1), ("ram_mb", ram_mb, 0),
                              ("disk_gb", disk_gb, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_FACT:
            raise InvalidFacts(f"The agent reported an invalid {label}: {value!r}.")
    server_name = (server_name or "").strip() or None
    if server_name is not None and len(server_name) > 255:
        raise InvalidFacts("server_name is longer than 255 characters.")
    return hostname, server_name


def _refusal(token, now):
    if token.status == CONSUMED:
        return TokenConsumed("This registration token was already used.")
    if token.status == REVOKED:
        return TokenRevoked("This registration token was revoked.")
    if token.expires_at <= now:
        return TokenExpired("This registration token has expired.")
    return TokenInvalid()


def consume_token(raw_token, *, hostname, cpu_cores, ram_mb, disk_gb, server_name=None,
                  images=None):
    """Trade a token for a Server and its agent credential (returned once).

    The claim is one conditional UPDATE (pending and unexpired -> consumed) in
    the same transaction as the Server it creates: of two agents racing with
    one token exactly one gets a server. The token's quota slot becomes the
    server's (consumed tokens are not counted, servers are)."""
    hostname, server_name = _facts(hostname, cpu_cores, ram_mb, disk_gb, server_name)
    raw_token = (raw_token or "").strip()
    if not raw_token.startswith(TOKEN_PREFIX) or len(raw_token) > 128:
        raise TokenInvalid()
    digest = security.digest(raw_token)
    with database.atomic():
        token = RegistrationToken.get_or_none(RegistrationToken.token_hash == digest)
        if token is None:
            raise TokenInvalid()
        now = clock.now()
        claimed = RegistrationToken.update(status=CONSUMED, consumed_at=now).where(
            RegistrationToken.id == token.id,
            RegistrationToken.status.in_(states.sources("registration_token", CONSUMED)),
            RegistrationToken.expires_at > now).execute()
        if not claimed:  # lost a race, or was never usable: say which
            raise _refusal(RegistrationToken.get_by_id(token.id), now)
        credential = CREDENTIAL_PREFIX + security.random_token(40)
        server = Server.create(
            organization=token.organization_id,
            name=token.server_name or server_name or hostname, provider=PROVIDER,
            cpu_cores=cpu_cores, ram_mb=ram_mb, disk_gb=disk_gb, hostname=hostname,
            agent_credential_hash=security.digest(credential), created_at=now)
        RegistrationToken.update(server=server).where(RegistrationToken.id == token.id).execute()
        if token.auto_deploy and images is not None:
            from control_plane.services.deploys import environments

            environments.auto_deploy(token.auto_deploy, server, images)
    return server, credential
