"""The audit log: every change made through the public API, the deployment-operations
API or the admin CLI, recorded by the service function that makes it, in the same
transaction (`record`), with who made it, from where and in which request.

Who is acting is bound by the surface before it calls a service (`acting`): the
public API's key, the operations API's user, the admin CLI's operator. Work the
control plane does on its own (the scheduler, automation rules firing, agents'
reports) binds no one and is not an audit event: its own records (tasks, runs,
events) say what it did. What changed is what was asked, with every secret left
out (`redacted`). Kept CP_AUDIT_RETENTION_DAYS (90), then deleted by the
housekeeping job."""

import contextlib
import contextvars
import datetime as dt
from dataclasses import dataclass

from peewee import SQL, fn

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.infra.pagination import CursorList
from control_plane.models import AuditEvent
from control_plane.vocabulary.errors import OrgScopeRequired

BATCH = 5000
SECRET_WORDS = ("secret", "password", "token", "credential", "private", "api_key")
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Actor:
    type: str  # api_key | user | operator
    id: str | None
    name: str | None = None
    source_ip: str | None = None
    request_id: str | None = None


_actor = contextvars.ContextVar("berth_audit_actor", default=None)
_quiet = contextvars.ContextVar("berth_audit_quiet", default=False)


@contextlib.contextmanager
def acting(actor):
    """The changes made inside are `actor`'s."""
    token = _actor.set(actor)
    try:
        yield actor
    finally:
        _actor.reset(token)


def bind(actor):
    """`actor` from now on in this context (a request's: reset with `unbind`)."""
    return _actor.set(actor)


def unbind(token):
    _actor.reset(token)


def current():
    """Who is acting now (None: no one)."""
    return None if _quiet.get() else _actor.get()


def active():
    """Whether someone is acting: a change made now is an audit event."""
    return _actor.get() is not None and not _quiet.get()


@contextlib.contextmanager
def quiet():
    """The changes made inside are part of one the caller records itself (an
    environment's creation starts its first deployment): not events of their own."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def record(org_id, action, target_type, target_id=None, changes=None):
    """One audit event, if someone is acting (inside the caller's transaction)."""
    actor = _actor.get()
    if actor is None or org_id is None or _quiet.get():
        return None
    return AuditEvent.create(
        organization=org_id, actor_type=actor.type, actor_id=actor.id,
        actor_name=actor.name, action=action, target_type=target_type,
        target_id=None if target_id is None else str(target_id),
        changes=redacted(changes) if changes else None, source_ip=actor.source_ip,
        request_id=actor.request_id)


def redacted(value, key=""):
    """`value` with every secret replaced: a field whose name says secret, password,
    token, credential or private key, and the value of a variable marked secret."""
    if any(word in key.lower() for word in SECRET_WORDS):
        return REDACTED
    if isinstance(value, dict):
        if value.get("secret") is True and "value" in value:
            return {**value, "value": REDACTED}
        return {k: redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


# --- reading -------------------------------------------------------------------------

FILTERS = ("action", "action_prefix", "actor_type", "actor_id", "target_type", "target_id")


def _listed(org_hex, *params, shape):
    names, since, until = shape
    query = AuditEvent.select().where(AuditEvent.organization == org_hex)
    values = iter(params)
    for name in names:
        if name == "action_prefix":  # `webhook.*`: its first characters, compared as text
            prefix = next(values)
            query = query.where(fn.SUBSTR(AuditEvent.action, SQL("1"), fn.LENGTH(prefix)) == prefix)
        else:
            query = query.where(getattr(AuditEvent, name) == next(values))
    if since:
        query = query.where(AuditEvent.created_at >= next(values))
    if until:
        query = query.where(AuditEvent.created_at < next(values))
    return query


EVENTS = CursorList("audit_events", AuditEvent, _listed, newest_first=True)


def list_events(actor, *, limit, cursor, since=None, until=None, **filters):
    """The key's organization's events, newest first, filtered by what is given."""
    if actor.project_scoped:  # not accounts.scope's check: accounts and webhooks record here
        raise OrgScopeRequired("The audit log needs an organization-scoped actor.")
    if (filters.get("action") or "").endswith(".*"):  # a family: `deploy.*`, `webhook.*`
        filters["action_prefix"] = filters.pop("action")[:-1]
    names = tuple(name for name in FILTERS if filters.get(name) is not None)
    params = [filters[name] for name in names]
    params += [p for p in (since, until) if p is not None]
    rows, meta = EVENTS.page(actor.organization_id.hex, *params, limit=limit, cursor=cursor,
                             shape=(names, since is not None, until is not None))
    for row in rows:
        row["actor"] = {"type": row.pop("actor_type"), "id": row.pop("actor_id"),
                        "name": row.pop("actor_name")}
    return rows, meta


def actions(actor):
    """The actions the organization's log holds, for a picker (at most 500), each
    family (`webhook.*`) before its members."""
    if actor.project_scoped:
        raise OrgScopeRequired("The audit log needs an organization-scoped actor.")
    found = [a for (a,) in AuditEvent.select(AuditEvent.action).distinct()
             .where(AuditEvent.organization == actor.organization_id)
             .order_by(AuditEvent.action).limit(500).tuples()]
    families = {a.split(".")[0] + ".*" for a in found if "." in a}
    return sorted(found + sorted(families), key=lambda a: (a.split(".")[0], a != a.split(".")[0]
                                                           + ".*", a))


def prune(now=None, retention_days=90):
    """Events older than the retention (a batch a turn); returns how many went."""
    cutoff = (now or clock.now()) - dt.timedelta(days=retention_days)
    ids = [i for (i,) in AuditEvent.select(AuditEvent.id)
           .where(AuditEvent.created_at < cutoff).limit(BATCH).tuples()]
    if not ids:
        return 0
    with database.atomic():
        return AuditEvent.delete().where(AuditEvent.id.in_(ids)).execute()
