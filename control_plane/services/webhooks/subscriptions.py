"""Outgoing webhooks, the public side: subscriptions (create, read, change,
delete), their signing secret, the synchronous test ping and the delivery log.

Events are stored under their `deploy.*` spelling (the names Event rows
carry); the `deployment.*` aliases are accepted and normalized (control_plane/events.py
holds both)."""

import base64
import datetime as dt
import json
import secrets
import uuid

from limits import RateLimitItemPerMinute
from peewee import fn

from control_plane.events import ALIASES, SUBSCRIBABLE, Name, canonical
from control_plane.infra import clock, secretbox
from control_plane.infra.db import database, for_update
from control_plane.infra.pagination import offset_page
from control_plane.models import Event, Organization, Project, Webhook, WebhookDelivery
from control_plane.services import audit
from control_plane.services.webhooks import net, payloads, urls
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import (
    NotFound,
    OrgScopeRequired,
    Unprocessable,
    WebhookLimitReached,
    WebhookRateLimited,
)

SECRET_PURPOSE = "webhook-secret"
MAX_PER_ORG = 100
MAX_EVENTS = 10
DELIVERY_LOG = 50  # deliveries listed per webhook, and kept by the delivery job
PING_TIMEOUT = 10
FORMATS = ("raw", "blocks", "cards", "embed")
# Create, update, delete, test, rotate-secret: per API key, on top of its own limit.
MUTATIONS = RateLimitItemPerMinute(10)

ACCEPTED = SUBSCRIBABLE + tuple(ALIASES)


def count_mutation(actor, limiter):
    """One webhook mutation by this key; 429 `webhook_rate_limit` past 10 in 60 s."""
    limiter.hit(MUTATIONS, "webhook-mutations", actor.public_id, error=WebhookRateLimited,
                message="Too many webhook changes with this key (10 per 60 s).")


def new_secret():
    """Standard Webhooks format: `whsec_` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def secret_of(webhook):
    """The webhook's signing secret, or None when it cannot be read (sealed under
    another CP_SECRET_KEY): rotating the secret repairs that."""
    return secretbox.unseal(webhook.secret_encrypted, SECRET_PURPOSE)


def normalize_events(names, most=MAX_EVENTS):
    """1 to `most` distinct known names, aliases rewritten to `deploy.*`; else 422."""
    unknown = sorted({n for n in names if n not in ACCEPTED})
    if unknown:
        raise Unprocessable(f"Unknown event name(s): {', '.join(unknown)}. Accepted: "
                            f"{', '.join(ACCEPTED)}.",
                            details={"json": {"events": [f"Unknown: {', '.join(unknown)}"]}})
    names = [canonical(n) for n in names]
    if not 1 <= len(names) <= most:
        raise Unprocessable(f"events must hold 1 to {most} names.",
                            details={"json": {"events": [f"1 to {most} names."]}})
    if len(set(names)) != len(names):
        raise Unprocessable("events must not repeat a name (aliases count as their deploy.* name).",
                            details={"json": {"events": ["Duplicate names."]}})
    return names


def _check_url(url, settings):
    return urls.check_url(url, allow_private=settings["WEBHOOK_ALLOW_PRIVATE"])


def visible(actor, channels=False):
    """The webhooks (or, with `channels`, the notification channels) the actor sees."""
    kind = Webhook.channel.is_null(False) if channels else Webhook.channel.is_null()
    query = Webhook.select().where(Webhook.organization == actor.organization_id, kind)
    if actor.project_scoped:
        query = query.where(Webhook.project == actor.project_id)
    return query


def list_webhooks(actor, *, limit, offset):
    return page(visible(actor), limit, offset)


def page(query, limit, offset):
    """Webhooks or channels oldest first (new ones land on the last page: offsets
    stay stable), as an offset page."""
    rows, total = offset_page(query.order_by(Webhook.created_at, Webhook.id),
                              limit=limit, offset=offset)
    return {"items": rows, "total": total, "limit": limit, "offset": offset,
            "has_more": offset + len(rows) < total}


def get_webhook(actor, webhook_id):
    webhook = visible(actor).where(Webhook.id == webhook_id).first()
    if webhook is None:
        raise NotFound("Webhook not found.")
    return webhook


OWN_PROJECT = object()


def project_for(actor, project_id):
    """The project a new webhook belongs to (None: organization-wide)."""
    if project_id is OWN_PROJECT:  # omitted: a project-scoped key's own project
        if not actor.project_scoped:
            return None
        project_id = actor.project_id
    if project_id is None:
        if actor.project_scoped:
            raise OrgScopeRequired("Organization-wide webhooks need an organization-scoped actor.")
        return None
    if actor.project_scoped and project_id != actor.project_id:
        raise NotFound("Project not found.")
    project = Project.get_or_none(Project.id == project_id,
                                  Project.organization == actor.organization_id,
                                  Project.deleted_at.is_null())
    if project is None:
        raise NotFound("Project not found.")
    return project.id


def create_webhook(actor, berth, *, url, events, description="", project_id=OWN_PROJECT,
                   is_active=True, format="raw"):
    """Returns (webhook, secret): the secret in clear this once."""
    url = _check_url(url, berth.settings)
    events = normalize_events(events)
    secret = new_secret()
    with database.atomic():
        # Serialize creations per organization, so the limit holds under concurrency.
        for_update(Organization.select().where(Organization.id == actor.organization_id)).first()
        project = project_for(actor, project_id)
        if Webhook.select().where(Webhook.organization == actor.organization_id,
                                  Webhook.channel.is_null()).count() >= MAX_PER_ORG:
            raise WebhookLimitReached(f"The organization already has {MAX_PER_ORG} webhooks.")
        webhook = Webhook.create(
            organization=actor.organization_id, project=project, url=url, events=events,
            description=description, format=format, is_active=is_active,
            secret_encrypted=secretbox.seal(secret, SECRET_PURPOSE), failure_count=0)
        audit.record(actor.organization_id, "webhook.create", "webhook", webhook.id, {
            "url": url, "events": events, "description": description, "format": format,
            "is_active": is_active, "project_id": project})
    return webhook, secret


def update_webhook(actor, berth, webhook_id, changes):
    """`changes` holds only the fields sent. `is_active: true` on a paused webhook
    re-enables it with failure_count back to 0."""
    fields = {f: changes[f] for f in ("description", "format", "is_active") if f in changes}
    if "url" in changes:
        fields["url"] = _check_url(changes["url"], berth.settings)
    if "events" in changes:
        fields["events"] = normalize_events(changes["events"])
    with database.atomic():
        webhook = for_update(visible(actor).where(Webhook.id == webhook_id)).first()
        if webhook is None:
            raise NotFound("Webhook not found.")
        check_activity(webhook, fields)
        Webhook.update(updated_at=clock.now(), **fields).where(Webhook.id == webhook.id).execute()
        audit.record(actor.organization_id, "webhook.update", "webhook", webhook.id, fields)
        return Webhook.get_by_id(webhook.id)


def delete_webhook(actor, webhook_id):
    """The webhook and its whole delivery history."""
    with database.atomic():
        remove(actor, get_webhook(actor, webhook_id), "webhook.delete", "webhook")


def remove(actor, row, action, target_type):
    """A webhook or channel and its delivery log, audited as `action`."""
    WebhookDelivery.delete().where(WebhookDelivery.webhook == row.id).execute()
    row.delete_instance()
    audit.record(actor.organization_id, action, target_type, row.id)


def check_activity(row, fields):
    """A change of `is_active` in `fields`, checked against the state table; a
    resumed webhook or channel starts its failure count again."""
    if "is_active" in fields and fields["is_active"] != row.is_active:
        states.check("webhook", states.webhook_state(row.is_active),
                     states.webhook_state(fields["is_active"]))
        if fields["is_active"]:
            fields["failure_count"] = 0


def rotate_secret(actor, webhook_id):
    """A new secret at once; the old one signs nothing more."""
    secret = new_secret()
    with database.atomic():
        webhook = get_webhook(actor, webhook_id)
        Webhook.update(secret_encrypted=secretbox.seal(secret, SECRET_PURPOSE),
                       updated_at=clock.now()).where(Webhook.id == webhook.id).execute()
        audit.record(actor.organization_id, "webhook.rotate_secret", "webhook", webhook.id)
    return {"secret": secret}


def deliveries(actor, webhook_id):
    """The 50 most recent deliveries, newest first, each with its event's name."""
    return delivery_log(get_webhook(actor, webhook_id))


def delivery_log(webhook):
    """A webhook's or channel's 50 most recent deliveries, newest first."""
    return list(
        WebhookDelivery.select(
            WebhookDelivery.id, Event.name.alias("event"), WebhookDelivery.status,
            WebhookDelivery.attempt_count, WebhookDelivery.response_status,
            WebhookDelivery.response_body, WebhookDelivery.error_reason,
            WebhookDelivery.duration_ms, WebhookDelivery.delivered_at, WebhookDelivery.created_at)
        .join(Event, on=(WebhookDelivery.event == Event.id))
        .where(WebhookDelivery.webhook == webhook.id)
        .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
        .limit(DELIVERY_LOG).dicts())


def sent_body(webhook, delivery_id):
    """The body a delivery of this webhook sends (the same on every attempt), as
    text: its event in the webhook's format. Its signature is never shown."""
    event = (Event.select().join(WebhookDelivery, on=(WebhookDelivery.event == Event.id))
             .where(WebhookDelivery.id == delivery_id, WebhookDelivery.webhook == webhook.id)
             .first())
    if event is None:
        raise NotFound("Delivery not found.")
    builder = payloads.FORMATS.get(webhook.format or "raw")
    envelope = payloads.envelope(event)
    return json.dumps(builder(envelope) if builder else envelope, indent=2,
                      ensure_ascii=False)


def redeliver(actor, webhook_id, delivery_id):
    """Send a delivery's event again, now, as a new delivery (the old one stays in
    the log as it ended). Its attempts and retries are a new delivery's: five, on
    the usual delays; a paused webhook's wait until it is resumed."""
    with database.atomic():
        webhook = get_webhook(actor, webhook_id)
        old = WebhookDelivery.get_or_none(WebhookDelivery.id == delivery_id,
                                          WebhookDelivery.webhook == webhook.id)
        if old is None:
            raise NotFound("Delivery not found.")
        now = clock.now()
        new = WebhookDelivery.create(webhook=webhook.id, event=old.event_id, created_at=now,
                                     status=states.DeliveryStatus.RETRYING, next_attempt_at=now)
        audit.record(actor.organization_id, "webhook.redeliver", "webhook", webhook.id,
                     {"delivery_id": str(old.id), "new_delivery_id": str(new.id)})
    return next(d for d in deliveries(actor, webhook_id) if d["id"] == new.id)


def delivery_states(webhooks):
    """What shows a failing receiver at once, per webhook id: `retrying`, how many of
    its deliveries are still owed (failure_count counts only those that failed for
    good, after their fifth attempt, hours later), and `last`, its latest attempt
    (a delivery: status, response_status, error_reason, and delivered_at, the time
    of its last attempt) or None. Two queries for a page of webhooks."""
    ids = [w.id for w in webhooks]
    if not ids:
        return {}
    D = WebhookDelivery
    retrying = dict(D.select(D.webhook, fn.COUNT(D.id))
                    .where(D.webhook.in_(ids), D.status == states.DeliveryStatus.RETRYING)
                    .group_by(D.webhook).tuples())
    ranked = (D.select(D.id, fn.ROW_NUMBER().over(
        partition_by=[D.webhook], order_by=[D.delivered_at.desc(), D.id.desc()]).alias("n"))
        .where(D.webhook.in_(ids), D.attempt_count > 0).alias("ranked"))
    last = {d.webhook_id: d for d in
            D.select(D.webhook, D.status, D.response_status, D.error_reason, D.delivered_at)
            .join(ranked, on=(D.id == ranked.c.id) & (ranked.c.n == 1))}
    return {i: {"retrying": retrying.get(i, 0), "last": last.get(i)} for i in ids}


def _iso_now():
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ping(actor, berth, webhook_id):
    """Send one `ping` event now, in the webhook's format, and report how the
    receiver answered. No delivery entry; failure_count and last_triggered_at stay.
    The receiver's body is never repeated back."""
    webhook = get_webhook(actor, webhook_id)
    secret = secret_of(webhook)
    if secret is None:
        return {"success": False, "status_code": 0, "duration_ms": 0,
                "message": "The webhook's secret cannot be read; rotate it."}
    envelope = ping_envelope(webhook.organization_id, {
        "webhook_id": str(webhook.id),
        "message": "Test ping from Berth: this webhook is reachable."})
    body, headers = payloads.render(webhook, envelope, secret)
    return outcome(net.post(webhook.url, body, headers, timeout=PING_TIMEOUT,
                            allow_private=berth.settings["WEBHOOK_ALLOW_PRIVATE"],
                            ca_bundle=berth.settings["WEBHOOK_CA_BUNDLE"]))


def ping_envelope(organization_id, data):
    """A `ping` event made now (never stored), as a test sends it."""
    return {"event_id": str(uuid.uuid4()), "event": Name.PING.value, "timestamp": _iso_now(),
            "organization_id": str(organization_id), "data": data}


def outcome(result):
    """A test's answer from a send's result: never the receiver's body."""
    message = None
    if not result.ok:
        message = result.error or f"The receiver answered {result.status_code}."
        if result.body_snippet and result.body_snippet.strip() in message:
            message = f"The receiver answered HTTP {result.status_code}."
    return {"success": bool(result.ok), "status_code": result.status_code or 0,
            "duration_ms": int(result.duration_ms or 0), "message": message}
