"""Shell sessions into an environment's ERP container: the container's shell, `odoo
shell` on its database, or one command, its bytes carried over the server's agent
(control_plane/shell_socket.py moves them; agent/shell.py runs them).

Opening one is a request like any other (`open_session`: who may, how many, an
audit event) that answers a single-use ticket; the client then opens the stream
and gives the ticket within TICKET_SECONDS (`attach`). The stream's holder says it
is alive (`seen`) and records its end (`end`: exit code, why, the transcript).
Who may: a user with `project.environments.shell` (and full access), a full-access
key. At most SHELL_SESSIONS_PER_SERVER open on a server: one whose holder stopped
saying it is alive (a web process that died) stops counting after STALE_SECONDS."""

import datetime as dt
import hashlib
import secrets

from limits import RateLimitItemPerMinute

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import ShellSession
from control_plane.services import audit
from control_plane.services.environment_settings import access
from control_plane.services.servers.monitoring import NOT_READY
from control_plane.vocabulary import errors

PERMISSION = "project.environments.shell"
PER_ENVIRONMENT = RateLimitItemPerMinute(30)  # sessions opened, per environment
TICKET_SECONDS = 30
SEEN_SECONDS = 20  # how often a stream's holder says it is alive
STALE_SECONDS = 90
TRANSCRIPT_MAX = 1024 * 1024
COMMAND_MAX = 64  # arguments
BATCH = 5000


def _digest(ticket):
    return hashlib.sha256(ticket.encode()).hexdigest()


def open_session(actor, environment_id, berth, *, odoo=False, command=None, tty=True):
    """A new session and its ticket (shown once, stored as a digest)."""
    if actor.read_only:
        raise errors.WriteAccessRequired("A shell needs full access.")
    if odoo and command:
        raise errors.Unprocessable(details={"command": ["Give a command or `odoo`, not both."]})
    settings = berth.settings
    env = access.environment(actor, environment_id, PERMISSION)
    if env.server_id is None:
        raise errors.NoServer("The environment has no server yet.")
    if env.status in NOT_READY:
        raise errors.EnvironmentNotReady(
            f"The environment is {env.status}; try again when it is running.")
    berth.limiter.hit_target(PER_ENVIRONMENT, "shell:environment", env.id.hex)
    ticket = "shk_" + secrets.token_urlsafe(32)
    who = audit.current()
    now = clock.now()
    with database.atomic():
        limit = settings["SHELL_SESSIONS_PER_SERVER"]
        if _open_on(env.server_id, now) >= limit:
            raise errors.ShellLimitReached(
                f"The server has {limit} shell sessions open; close one first.")
        row = ShellSession.create(
            organization=env.project.organization_id, environment=env.id,
            server_id=env.server_id, actor_type=who.type if who else actor.kind,
            actor_id=who.id if who else None, actor_name=who.name if who else actor.label,
            source_ip=who.source_ip if who else None, odoo=bool(odoo),
            command=list(command) if command else None, tty=bool(tty),
            ticket_hash=_digest(ticket),
            expires_at=now + dt.timedelta(seconds=TICKET_SECONDS))
        audit.record(row.organization_id, "shell.open", "environment", env.id,
                     {"session_id": str(row.id), "odoo": row.odoo, "command": row.command})
    return row, ticket


def _open_on(server_id, now):
    """Sessions counting against the server's limit: a ticket not used yet and not
    expired, or a stream whose holder said it is alive lately."""
    stale = now - dt.timedelta(seconds=STALE_SECONDS)
    waiting = ShellSession.started_at.is_null() & (ShellSession.expires_at > now)
    alive = ShellSession.started_at.is_null(False) & (ShellSession.seen_at > stale)
    return (ShellSession.select()
            .where(ShellSession.server_id == server_id, ShellSession.ended_at.is_null(),
                   waiting | alive).count())


def attach(session_id, ticket):
    """The stream's start: the session its ticket opens (used once, in time), or None."""
    now = clock.now()
    with database.atomic():
        taken = (ShellSession.update(ticket_hash=None, started_at=now, seen_at=now)
                 .where(ShellSession.id == session_id,
                        ShellSession.ticket_hash == _digest(ticket or ""),
                        ShellSession.expires_at > now, ShellSession.ended_at.is_null())
                 .execute())
    return ShellSession.get_by_id(session_id) if taken else None


def seen(session_ids):
    if session_ids:
        ShellSession.update(seen_at=clock.now()).where(
            ShellSession.id.in_(list(session_ids)), ShellSession.ended_at.is_null()).execute()


def end(session_id, reason, exit_code=None, transcript=None):
    """The session ended (`reason`: exited, closed, idle, too_long, disconnected,
    failed): recorded once, with an audit event in the name of who opened it."""
    now = clock.now()
    fields = {"ended_at": now, "end_reason": reason, "exit_code": exit_code}
    if transcript is not None:
        fields["transcript"] = transcript[:TRANSCRIPT_MAX].decode("utf-8", "replace")
        fields["transcript_truncated"] = len(transcript) > TRANSCRIPT_MAX
    with database.atomic():
        if not ShellSession.update(**fields).where(
                ShellSession.id == session_id, ShellSession.ended_at.is_null()).execute():
            return
        row = ShellSession.get_by_id(session_id)
        who = audit.Actor(row.actor_type, row.actor_id, row.actor_name, row.source_ip)
        with audit.acting(who):
            audit.record(row.organization_id, "shell.close", "environment", row.environment_id,
                         {"session_id": str(row.id), "started_at": row.started_at,
                          "ended_at": now, "exit_code": exit_code, "reason": reason})


def sessions(actor, environment_id, limit=50):
    """The environment's sessions, newest first (who may open them may read them)."""
    env = access.environment(actor, environment_id, PERMISSION)
    return list(ShellSession.select().where(ShellSession.environment == env.id)
                .order_by(ShellSession.created_at.desc(), ShellSession.id.desc()).limit(limit))


def session(actor, environment_id, session_id):
    env = access.environment(actor, environment_id, PERMISSION)
    row = ShellSession.get_or_none(ShellSession.id == session_id,
                                   ShellSession.environment == env.id)
    if row is None:
        raise errors.NotFound("Shell session not found.")
    return row


def prune(now, retention_days):
    """Records (and transcripts) older than the audit log's retention, a batch a turn;
    before that, sessions that cannot go on are recorded as ended: a ticket never used
    (`expired`), a stream nobody holds any more (`disconnected`). Rows are looked for
    first: a turn that finds nothing writes nothing (no write lock on SQLite)."""
    open_ = ShellSession.ended_at.is_null()
    stale = now - dt.timedelta(seconds=STALE_SECONDS)
    for reason, which in (
            ("expired", ShellSession.started_at.is_null() & (ShellSession.expires_at < now)),
            ("disconnected", ShellSession.started_at.is_null(False)
             & (ShellSession.seen_at < stale))):
        ids = _ids(ShellSession.select(ShellSession.id).where(open_, which))
        if ids:
            ShellSession.update(ended_at=now, end_reason=reason).where(
                ShellSession.id.in_(ids), open_).execute()
    ids = _ids(ShellSession.select(ShellSession.id).where(
        ShellSession.created_at < now - dt.timedelta(days=retention_days)))
    if not ids:
        return 0
    with database.atomic():
        return ShellSession.delete().where(ShellSession.id.in_(ids)).execute()


def _ids(query):
    return [i for (i,) in query.limit(BATCH).tuples()]
