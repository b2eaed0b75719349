"""Outgoing webhooks, the fan-out: events of the outbox not yet fanned out become
one `retrying` delivery, due now, per matching active webhook (delivery.py sends
them).

Safe with several schedulers at once: an event is fanned out by the one whose
conditional UPDATE of `fanned_out` changed it, in the same transaction as its
deliveries. A paused webhook gets no deliveries of new events."""

import datetime as dt
import uuid

from control_plane.events import canonical
from control_plane.infra import clock
from control_plane.infra.db import columns, database, execute_many, found, insert_sql, is_sqlite
from control_plane.models import Event, Webhook, WebhookDelivery
from control_plane.vocabulary.states import DeliveryStatus

BATCH = 500  # events read at once


def fan_out(limit=BATCH):
    """Fan out up to `limit` events. Returns the number of events this call took."""
    return _fan_out(limit)[0]


def claimed(limit, room, claim_seconds):
    """`fan_out` for a sending loop with `room` free: it takes only the events whose
    deliveries fit in it (one event at least) and claims every delivery it creates
    for `claim_seconds`, in the same INSERT. Returns (events taken,
    [(delivery, webhook, event)] claimed): the loop sends them without reading
    them back."""
    return _fan_out(limit, room, claim_seconds)


class Claimed:
    """What sending and recording read of a delivery this fan-out created and
    claimed (a model instance costs more to build than the rest of its fan-out)."""

    __slots__ = ("id", "attempt_count", "created_at", "claimed_until")

    def __init__(self, id, attempt_count, created_at, claimed_until):  # noqa: A002
        self.id, self.attempt_count = id, attempt_count
        self.created_at, self.claimed_until = created_at, claimed_until


def _fan_out(limit, room=0, claim_seconds=0):
    p = database.param
    unfanned = f'FROM "{Event._meta.table_name}" WHERE "fanned_out" = {p}'
    if not found(f"SELECT 1 {unfanned}", [False]):
        return 0, []  # the common case: no write transaction (SQLite's lock) at all
    pending = (f'SELECT {columns(Event._meta.sorted_fields)} {unfanned} '
               f'ORDER BY "created_at", "id" LIMIT {p}')
    if not is_sqlite():
        pending += " FOR UPDATE SKIP LOCKED"  # racing schedulers split them
    with database.atomic():
        events, hooks = _taken(Event.raw(pending, False, limit).iterator(), room)
        if not events:
            return 0, []
        # One conditional UPDATE: only the events it changed are this call's.
        mine = {row.id for row in Event.update(fanned_out=True)
                .where(Event.id.in_([e.id for e in events]),
                       Event.fanned_out == False)  # noqa: E712
                .returning(Event.id).execute()}
        now, rows, jobs = clock.now(), [], []
        until = now + dt.timedelta(seconds=claim_seconds) if room else None
        for i, event in enumerate(e for e in events if e.id in mine):
            # created_at 1 us apart per event, in the events' order: the log, pruning,
            # claims and the failure count follow the events, not random ids. The
            # next turn's `now` is later than this batch's spread (the events' own
            # inserts took far longer than 1 us each).
            created = now + dt.timedelta(microseconds=i)
            for hook in hooks.get(event.organization_id, ()):
                if not matches(hook, event):
                    continue
                row = {"id": uuid.uuid4(), "webhook": hook.id, "event": event.id,
                       "status": DeliveryStatus.RETRYING, "attempt_count": 0,
                       "next_attempt_at": now, "created_at": created,
                       "claimed_until": until}
                rows.append(row)
                if until:
                    jobs.append((Claimed(row["id"], 0, created, until), hook, event))
        _insert_many(rows)
    return len(mine), jobs


def _taken(rows, room):
    """The events to fan out now, read in order (rows past them are never made into
    models), and their organizations' active webhooks: with `room`, the first events
    whose deliveries number at most `room` (one at least)."""
    taken, hooks, count = [], {}, 0
    for event in rows:
        org = event.organization_id
        if org not in hooks:
            hooks[org] = _active_hooks(org)
        count += sum(1 for hook in hooks[org] if matches(hook, event))
        if room and taken and count > room:
            break
        taken.append(event)
    return taken, hooks


_INSERT_FIELDS = ("id", "webhook", "event", "status", "attempt_count", "next_attempt_at",
                  "created_at", "claimed_until")


def _insert_many(rows):
    """One prepared INSERT for every new delivery (peewee's multi-row INSERT costs
    more to build than to run)."""
    sql, fields = insert_sql(WebhookDelivery, _INSERT_FIELDS)
    execute_many(sql, [[f.db_value(row[f.name]) for f in fields] for row in rows])


def _active_hooks(org_id):
    p = database.param
    return list(Webhook.raw(
        f'SELECT {columns(Webhook._meta.sorted_fields)} FROM "{Webhook._meta.table_name}" '
        f'WHERE "{Webhook.organization.column_name}" = {p} AND "is_active" = {p}',
        Webhook.organization.db_value(org_id), True))


def matches(hook, event):
    if hook.project_id is not None and hook.project_id != event.project_id:
        return False
    return event.name in {canonical(n) for n in hook.events or ()}
