"""Notification channels, the public side: create, read, change, delete, a test
message now, and the delivery log. A channel is a subscription of its own type
(channel_types.py) beside the webhooks: the same outbox, deliveries, retries and
auto-pause, and its own limits. Its secret settings are sealed and never shown
again."""

import marshmallow as ma
from limits import RateLimitItemPerMinute

from control_plane.events import SUBSCRIBABLE
from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.models import Organization, Webhook
from control_plane.services import audit
from control_plane.services.webhooks import channel_send, channel_types, mail, subscriptions, urls
from control_plane.vocabulary.errors import (
    ChannelLimitReached,
    ChannelRateLimited,
    InvalidWebhookUrl,
    NotFound,
    Unprocessable,
)

MAX_PER_ORG = 100
MAX_EVENTS = len(SUBSCRIBABLE)  # a channel may follow every event
TEST_TIMEOUT = 10
MUTATIONS = RateLimitItemPerMinute(10)  # and test messages: per API key


def count_mutation(actor, limiter):
    limiter.hit(MUTATIONS, "channel-mutations", actor.public_id, error=ChannelRateLimited,
                message="Too many notification channel changes with this key (10 per 60 s).")


def list_channels(actor, *, limit, offset):
    return subscriptions.page(subscriptions.visible(actor, channels=True), limit, offset)


def get_channel(actor, channel_id, lock=False):
    query = subscriptions.visible(actor, channels=True).where(Webhook.id == channel_id)
    channel = (for_update(query) if lock else query).first()
    if channel is None:
        raise NotFound("Notification channel not found.")
    return channel


def _settings(kind, given, berth):
    """`given` checked against the type's settings: (options, secrets, destination),
    or 422 naming the setting."""
    try:
        loaded = channel_types.SCHEMAS[kind]().load(given or {})
    except ma.ValidationError as exc:
        raise Unprocessable(f"Invalid settings for a {kind} channel.",
                            details={"json": {"settings": exc.messages}}) from None
    for name in channel_types.URL_FIELDS:
        if name in loaded:
            try:
                loaded[name] = urls.check_url(loaded[name],
                                              allow_private=berth.settings["WEBHOOK_ALLOW_PRIVATE"])
            except InvalidWebhookUrl as exc:
                raise Unprocessable(exc.message, details={"json": {"settings": {
                    name: [exc.message]}}}) from None
    if kind == "email" and not mail.configured(berth.settings):
        raise Unprocessable("E-mail channels need the control plane's SMTP server "
                            "(CP_SMTP_HOST).", details={"json": {"type": [
                                "No SMTP server is configured."]}})
    options, secrets = channel_types.split(kind, loaded)
    return options, secrets, channel_types.destination(kind, options, secrets)


def _secrets_follow(channel, stored, given):
    """A channel's secrets go only where they were given for: moving its address (a
    Bot API server, a homeserver, an ntfy server) needs them again, or the stored
    token would be sent to the new address."""
    moved = [k for k in channel_types.URL_FIELDS
             if k in given and given[k] != (channel.options or {}).get(k)]
    missing = sorted(k for k in channel_types.secret_names(channel.channel)
                     if stored.get(k) and k not in given)
    if moved and missing:
        said = f"Give {', '.join(missing)} again to send to a new {moved[0]}."
        raise Unprocessable(said, details={"json": {"settings": {k: [said] for k in missing}}})


def create_channel(actor, berth, *, type, events, settings, description="",  # noqa: A002
                   project_id=subscriptions.OWN_PROJECT, is_active=True):
    events = subscriptions.normalize_events(events, MAX_EVENTS)
    options, secrets, url = _settings(type, settings, berth)
    with database.atomic():
        # Serialize creations per organization, so the limit holds under concurrency.
        for_update(Organization.select().where(Organization.id == actor.organization_id)).first()
        project = subscriptions.project_for(actor, project_id)
        if Webhook.select().where(Webhook.organization == actor.organization_id,
                                  Webhook.channel.is_null(False)).count() >= MAX_PER_ORG:
            raise ChannelLimitReached(
                f"The organization already has {MAX_PER_ORG} notification channels.")
        channel = Webhook.create(
            organization=actor.organization_id, project=project, channel=type, url=url,
            options=options, events=events, description=description, is_active=is_active,
            secret_encrypted=channel_send.seal(secrets), failure_count=0)
        audit.record(actor.organization_id, "channel.create", "notification_channel", channel.id,
                     {"type": type, "destination": url, "events": events,
                      "description": description, "is_active": is_active,
                      "project_id": project})
    return channel


def update_channel(actor, berth, channel_id, changes):
    """`changes` holds the fields sent. `settings` are merged over the stored ones
    (a secret left out is kept), then checked whole. `is_active: true` on a paused
    channel resumes it with failure_count back to 0."""
    fields = {f: changes[f] for f in ("description", "is_active") if f in changes}
    if "events" in changes:
        fields["events"] = subscriptions.normalize_events(changes["events"], MAX_EVENTS)
    with database.atomic():
        channel = get_channel(actor, channel_id, lock=True)
        shown = dict(fields)  # what the audit event says: never a sealed value
        if "settings" in changes:
            stored = channel_send.secrets_of(channel) or {}
            given = changes["settings"] or {}
            _secrets_follow(channel, stored, given)
            merged = {**(channel.options or {}), **stored, **given}
            options, secrets, url = _settings(channel.channel, merged, berth)
            fields.update(options=options, url=url, secret_encrypted=channel_send.seal(secrets))
            shown.update(settings=options, destination=url,
                         sealed_replaced=sorted(k for k in secrets if secrets[k] != stored.get(k)))
        subscriptions.check_activity(channel, fields)
        Webhook.update(updated_at=clock.now(), **fields).where(Webhook.id == channel.id).execute()
        audit.record(actor.organization_id, "channel.update", "notification_channel",
                     channel.id, shown)
        return Webhook.get_by_id(channel.id)


def delete_channel(actor, channel_id):
    """The channel and its delivery log."""
    with database.atomic():
        subscriptions.remove(actor, get_channel(actor, channel_id), "channel.delete",
                             "notification_channel")


def deliveries(actor, channel_id):
    return subscriptions.delivery_log(get_channel(actor, channel_id))


def test_channel(actor, berth, channel_id):
    """Send one test message now and report how it went, as a webhook's test ping
    does: no delivery entry, failure_count and last_triggered_at unchanged."""
    channel = get_channel(actor, channel_id)
    envelope = subscriptions.ping_envelope(channel.organization_id, {
        "channel_id": str(channel.id),
        "message": "Test message from Berth: this notification channel works."})
    result = channel_send.send(channel, envelope, berth.settings, TEST_TIMEOUT,
                               envelope["event_id"])
    audit.record(actor.organization_id, "channel.test", "notification_channel", channel.id,
                 {"success": bool(result.ok)})
    return subscriptions.outcome(result)
