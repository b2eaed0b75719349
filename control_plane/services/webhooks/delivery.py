"""Outgoing webhooks, the sending side (a scheduler job): fan-out of the event
outbox into deliveries (fanout.py), then durable delivery with retries and
auto-pause.

Safe with several schedulers at once: an event is fanned out by the one whose
conditional UPDATE of `fanned_out` changed it, in the same transaction as its
deliveries; a delivery is sent by the one whose conditional UPDATE (or whose
fan-out INSERT) set its `claimed_until`. A claim lasts CLAIM_SECONDS and a send
starts only while the timeout and CLAIM_MARGIN are left of it (else the delivery
is given back unsent), so only a killed worker's claims lapse, and another sends
them.

Attempts: 1 at once, then after ~30 s, ~5 min, ~30 min, ~2 h (each delay +-10 %
jitter); after the fifth failure the delivery is `failed`. A webhook counts
consecutive deliveries that ended `failed` (`failure_count`; a delivered one resets
it); the tenth pauses it (`is_active` false) in the same transaction. While paused,
its pending deliveries stay `retrying` and are not sent, and new events are not
fanned out to it; once re-enabled the pending ones go out at the next turn."""

import datetime as dt
import functools
import logging
import random
import time

from control_plane.infra import clock, config, secretbox
from control_plane.infra.db import database, execute, execute_many, found, is_sqlite
from control_plane.infra.observability import WEBHOOK_ATTEMPTS
from control_plane.models import Event, Webhook, WebhookDelivery
from control_plane.services.webhooks import (
    channel_send,
    fanout,
    net,
    payloads,
    senders,
    subscriptions,
    urls,
)
from control_plane.vocabulary.states import DeliveryStatus

log = logging.getLogger("berth.webhooks")

JITTER = 0.1
CLAIM_SECONDS = 60
PAUSE_AFTER = 10  # consecutive failed deliveries
MAX_TIMEOUT = 10.0  # spec: the receiver answers within 10 s
BATCH = 64  # outcomes recorded at once (at most LINGER_POLL apart); claim_due's default
IN_FLIGHT = 256  # claimed, outcome not yet recorded (per loop)
# A claimed delivery starts its send only while its claim has at least the send's
# timeout and this margin left; otherwise it is given back unsent, so a claim never
# lapses under a send (another worker would repeat it).
CLAIM_MARGIN = 5.0
TURN_SECONDS = 20  # one scheduler turn stops taking new work after this
LINGER_SECONDS = 2.0  # the scheduler's turns: how long to keep looking after work
LINGER_POLL = 0.05
SNIPPET = 1000  # characters of the answer kept
PRUNE_SECONDS = 1.0  # a loop prunes a webhook's delivery log at most this often


def run(berth, linger=0.0):
    """The scheduler job: fan out, then deliver what is due, until nothing is left
    (or the turn is long enough). Up to IN_FLIGHT deliveries are claimed and on
    the senders at once; outcomes are recorded in batches as they come back, and
    the freed room is claimed again at once. Deliveries created by this loop's
    fan-out are claimed in the same INSERT and go straight to the senders. With
    `linger`, a turn that found work keeps looking every LINGER_POLL seconds until
    it has been idle that long: events that come in a stream go out within tens of
    milliseconds, not at the next turn. Returns the number of attempts made."""
    delays = retry_delays(berth.settings)  # a bad setting fails here, before any send
    inbox = senders.Inbox()
    pruned = Pruned()
    started, attempts, idle_since = time.monotonic(), 0, None
    while True:
        in_turn = time.monotonic() - started < TURN_SECONDS
        room = IN_FLIGHT - inbox.pending if in_turn else 0
        # No more events than there is room for: their deliveries are claimed as
        # they are created, not read back by claim_due.
        fanned, jobs = (fanout.claimed(min(fanout.BATCH, room), room, CLAIM_SECONDS)
                        if room else (0, []))
        if room - len(jobs) > 0:
            jobs += claim_due(min(IN_FLIGHT // 2, room - len(jobs)))
        _submit(jobs, berth.settings, inbox)
        done = inbox.take(at_least=BATCH, timeout=LINGER_POLL)
        if done:
            attempts += record(done, delays, paused=inbox.paused, pruned=pruned)
        if jobs or fanned or done or inbox.pending:
            idle_since = None
            continue
        now = time.monotonic()
        idle_since = idle_since or now
        if not attempts or now - idle_since >= linger or not in_turn:
            prune_all(pruned)
            return attempts
        time.sleep(LINGER_POLL)


def _submit(jobs, settings, inbox):
    """Each job to the senders, under its receiver's bound; an event's raw body is
    encoded once for all its webhooks."""
    bodies = {}
    pool = senders.shared()
    for job in jobs:
        pool.submit(receiver_of(job[1].url),
                    functools.partial(send, job, settings, bodies, inbox.paused), inbox)


@functools.lru_cache(maxsize=4096)
def receiver_of(url):
    """Whose bound a send counts against: the URL's host and port (e-mail: the
    SMTP server)."""
    if url.startswith("mailto:"):
        return "smtp"
    try:
        target = urls.parse(url)
    except ValueError:
        return url
    return f"{target.host}:{target.port}"


# -- delivery -----------------------------------------------------------------------

def claim_due(limit=BATCH):
    """Due deliveries of active webhooks, claimed for CLAIM_SECONDS by one
    conditional UPDATE: a list of (delivery, webhook, event) this call alone may
    send. PostgreSQL skips rows another claim holds locked (no waiting, no
    deadlock); SQLite's write transactions are serialised anyway."""
    now = clock.now()
    until = now + dt.timedelta(seconds=CLAIM_SECONDS)
    if not _any_due(now):
        return []  # nothing due: no write transaction
    D = WebhookDelivery
    unclaimed = D.claimed_until.is_null() | (D.claimed_until < now)
    due = (D.select(D.id)
           .where(D.status == DeliveryStatus.RETRYING, D.next_attempt_at <= now, unclaimed,
                  D.webhook.in_(Webhook.select(Webhook.id)
                                .where(Webhook.is_active == True)))  # noqa: E712
           .order_by(D.next_attempt_at, D.created_at, D.id).limit(limit))
    if not is_sqlite():
        due = due.for_update("FOR UPDATE SKIP LOCKED")
    with database.atomic():
        ids = [row.id for row in D.update(claimed_until=until)
               .where(D.id.in_(due), D.status == DeliveryStatus.RETRYING, D.next_attempt_at <= now,
                      unclaimed).returning(D.id).execute()]
        if not ids:
            return []
        rows = (D.select(D, Webhook, Event).join(Webhook).switch(D).join(Event)
                .where(D.id.in_(ids)).order_by(D.next_attempt_at, D.created_at, D.id))
        return [(d, d.webhook, d.event) for d in rows]


# The loop's questions on every turn (any event to fan out, any delivery due, which
# events and webhooks) are fixed SQL: peewee's query builder took more CPU than
# running them.

def _any_due(now):
    """`claim_due`'s question without its claim: any delivery due, of an active webhook."""
    D, W, p = WebhookDelivery, Webhook, database.param
    at = D.next_attempt_at.db_value(now)
    return found(f'SELECT 1 FROM "{D._meta.table_name}" WHERE "status" = {p} '
                f'AND "next_attempt_at" <= {p} '
                f'AND ("claimed_until" IS NULL OR "claimed_until" < {p}) '
                f'AND "{D.webhook.column_name}" IN '
                f'(SELECT "id" FROM "{W._meta.table_name}" WHERE "is_active" = {p})',
                [DeliveryStatus.RETRYING.value, at, at, True])


def timeout_of(settings):
    """WEBHOOK_TIMEOUT_SECONDS, bounded by the spec's 10 s."""
    return min(MAX_TIMEOUT, max(0.1, float(settings.get("WEBHOOK_TIMEOUT_SECONDS") or 10)))


def send(job, settings, bodies=None, paused=()):
    """One attempt; never raises. Returns (delivery, webhook, SendResult-like), or
    RELEASED in place of the result when the claim has too little time left or the
    webhook was paused (`paused`: ids) while this job waited for its turn.
    `bodies` (event id -> raw envelope bytes) is shared by the jobs of a batch."""
    delivery, hook, event = job
    try:  # everything: a job that raised would hold its receiver's slot for good
        timeout = timeout_of(settings)
        left = (delivery.claimed_until - clock.now()).total_seconds() \
            if delivery.claimed_until else CLAIM_SECONDS
        if left < timeout + CLAIM_MARGIN or hook.id in paused:
            return delivery, hook, RELEASED
        if hook.channel:
            return delivery, hook, channel_send.send(hook, payloads.envelope(event), settings,
                                                     timeout, delivery.id)
        secret = secretbox.unseal_cached(hook.secret_encrypted,
                                         subscriptions.SECRET_PURPOSE)
        if secret is None:
            return delivery, hook, net.failed("the signing secret cannot be read; rotate it")
        env = payloads.envelope(event)
        raw = None
        if bodies is not None and (hook.format or "raw") == "raw":
            raw = bodies.get(event.id)
            if raw is None:
                raw = bodies[event.id] = payloads.dump(env)
        body, headers = payloads.render(hook, env, secret, raw=raw)
        return delivery, hook, net.post(
            hook.url, body, headers, timeout=timeout,
            allow_private=settings["WEBHOOK_ALLOW_PRIVATE"],
            ca_bundle=settings.get("WEBHOOK_CA_BUNDLE"))
    except Exception as exc:  # a bug here must not lose the claim's bookkeeping
        log.exception("webhook delivery %s: sending failed", delivery.id)
        return delivery, hook, net.failed(f"internal error: {type(exc).__name__}")


RELEASED = object()  # not sent: the claim is given back, no attempt counted


def retry_delays(settings):
    """The seconds before attempts 2..5 (setting WEBHOOK_RETRY_DELAYS); raises
    ValueError on a bad value."""
    return config.retry_delays(settings.get("WEBHOOK_RETRY_DELAYS"))


def next_delay(attempt, delays):
    """Seconds until attempt `attempt + 1`, or None when `attempt` was the last."""
    if attempt > len(delays):
        return None
    base = delays[attempt - 1]
    return base * random.uniform(1 - JITTER, 1 + JITTER)


_UPDATE_FIELDS = ("status", "attempt_count", "next_attempt_at", "claimed_until",
                  "response_status", "response_body", "error_reason", "duration_ms",
                  "delivered_at")


def record(results, delays, paused=None, pruned=None):
    """Every attempt's outcome, the webhooks' counters and pauses, and pruning: one
    transaction, one prepared UPDATE for the deliveries and one per webhook.
    Deliveries given back unsent (RELEASED) only lose their claim. The ids of the
    webhooks this pauses are added to `paused`. With `pruned` (a loop's `Pruned`),
    a webhook's log is pruned at most every PRUNE_SECONDS (the loop prunes the rest
    when it ends). Returns the number of attempts recorded."""
    now = clock.now()
    rows, outcomes = [], {}
    released = [r[0].id for r in results if r[2] is RELEASED]
    results = [r for r in results if r[2] is not RELEASED]
    # Oldest first per webhook: "consecutive" follows the order of the events.
    for delivery, hook, result in sorted(results, key=lambda r: (r[0].created_at, str(r[0].id))):
        attempt = delivery.attempt_count + 1
        fields = {"attempt_count": attempt, "claimed_until": None, "delivered_at": now,
                  "response_status": result.status_code, "duration_ms": result.duration_ms,
                  "response_body": str(result.body_snippet)[:SNIPPET]
                  if result.body_snippet else None,
                  "error_reason": None if result.ok else (result.error or _reason(result)),
                  "status": DeliveryStatus.RETRYING, "next_attempt_at": None}
        outcome = outcomes.setdefault(hook.id, [])
        if result.ok:
            fields["status"] = DeliveryStatus.DELIVERED
            outcome.append(DeliveryStatus.DELIVERED)
        else:
            delay = next_delay(attempt, delays)
            if delay is None:
                fields["status"] = DeliveryStatus.FAILED
                outcome.append(DeliveryStatus.FAILED)
            else:
                fields["next_attempt_at"] = now + dt.timedelta(seconds=delay)
        WEBHOOK_ATTEMPTS.labels(fields["status"]).inc()  # the send happened, whatever follows
        rows.append([WebhookDelivery._meta.fields[f].db_value(fields[f]) for f in _UPDATE_FIELDS]
                    + [WebhookDelivery.id.db_value(delivery.id)])
    with database.atomic():
        if released:
            WebhookDelivery.update(claimed_until=None).where(
                WebhookDelivery.id.in_(released)).execute()
        if rows:
            _update_many(rows)
        # One order for every worker: two recording at once never deadlock on rows.
        for hook_id in sorted(outcomes, key=str):
            if _settle_webhook(hook_id, outcomes[hook_id], now) and paused is not None:
                paused.add(hook_id)
            if pruned is None or pruned.due(hook_id):
                prune(hook_id)
    return len(rows)


def _update_many(rows):
    table = WebhookDelivery._meta.table_name
    p = database.param
    sets = ", ".join(f'"{WebhookDelivery._meta.fields[f].column_name}" = {p}'
                     for f in _UPDATE_FIELDS)
    execute_many(f'UPDATE "{table}" SET {sets} WHERE "id" = {p}', rows)


def _reason(result):
    return f"HTTP {result.status_code}" if result.status_code else "delivery failed"


def _settle_webhook(hook_id, outcomes, now):
    """last_triggered_at; failure_count: consecutive deliveries that ended failed
    (a delivered one resets it); the tenth pauses the webhook."""
    W, p = Webhook, database.param
    if DeliveryStatus.DELIVERED in outcomes:
        last = len(outcomes) - 1 - outcomes[::-1].index(DeliveryStatus.DELIVERED)
        count, base = outcomes[last + 1:].count(DeliveryStatus.FAILED), ""
    else:
        count, base = outcomes.count(DeliveryStatus.FAILED), '"failure_count" + '
    # Fixed SQL: one UPDATE per webhook per recorded batch, on the sending hot path.
    execute(
        f'UPDATE "{W._meta.table_name}" SET "last_triggered_at" = {p}, '
        f'"failure_count" = {base}{p} WHERE "id" = {p}',
        [W.last_triggered_at.db_value(now), count, W.id.db_value(hook_id)])
    if DeliveryStatus.FAILED not in outcomes:
        return False
    paused = (Webhook.update(is_active=False, updated_at=now)
              .where(Webhook.id == hook_id, Webhook.is_active == True,  # noqa: E712
                     Webhook.failure_count >= PAUSE_AFTER).execute())
    if paused:
        log.warning("webhook %s paused after %d consecutive failed deliveries",
                    hook_id, PAUSE_AFTER)
    return bool(paused)


class Pruned:
    """When a loop last pruned each webhook's log, and which ones it left to prune
    (pruning reads every row of a webhook: once a second is enough while a burst
    goes out)."""

    def __init__(self):
        self.at, self.left = {}, set()

    def due(self, hook_id):
        now = time.monotonic()
        if now - self.at.get(hook_id, -PRUNE_SECONDS) < PRUNE_SECONDS:
            self.left.add(hook_id)
            return False
        self.at[hook_id] = now
        self.left.discard(hook_id)
        return True


def prune_all(pruned):
    """The logs a loop left unpruned."""
    if pruned.left:
        with database.atomic():
            for hook_id in sorted(pruned.left, key=str):
                prune(hook_id)
        pruned.left.clear()


def prune(hook_id, keep=subscriptions.DELIVERY_LOG):
    """Finished deliveries beyond the `keep` most recent go; pending ones stay
    (they are still owed to the receiver)."""
    recent = (WebhookDelivery.select(WebhookDelivery.id)
              .where(WebhookDelivery.webhook == hook_id)
              .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
              .limit(keep))
    WebhookDelivery.delete().where(WebhookDelivery.webhook == hook_id,
                                   WebhookDelivery.status != DeliveryStatus.RETRYING,
                                   WebhookDelivery.id.not_in(recent)).execute()
