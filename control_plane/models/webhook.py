import uuid

import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import Organization
from control_plane.models.project import Project
from control_plane.vocabulary.states import DeliveryStatus


class Webhook(BaseModel):
    """A subscription to events: an outgoing webhook (`channel` null), or a
    notification channel of that type (e-mail, Slack, Telegram...). Both share the
    outbox's fan-out, deliveries, retries and auto-pause.

    A channel's `url` is where it sends, without secrets (shown to users);
    `options` holds its other settings that are not secret, and `secret_encrypted`
    its secret ones (a chat's webhook URL, a bot's token), sealed as JSON."""

    organization = peewee.ForeignKeyField(Organization, backref="webhooks")
    project = peewee.ForeignKeyField(Project, null=True, backref="webhooks")
    url = peewee.CharField(max_length=2048)
    events = JSONField(default=list)
    description = peewee.CharField(max_length=500, default="")
    format = peewee.CharField(max_length=8, default="raw")
    is_active = peewee.BooleanField(default=True)
    secret_encrypted = peewee.TextField()  # signing needs the secret itself
    channel = peewee.CharField(max_length=8, null=True)
    options = JSONField(null=True)
    last_triggered_at = DateTimeField(null=True)
    failure_count = peewee.IntegerField(default=0)  # consecutive failed deliveries
    updated_at = DateTimeField(null=True)


class Event(BaseModel):
    """Outbox: written in the same transaction as the change that causes it."""

    event_id = peewee.UUIDField(default=uuid.uuid4, unique=True)
    organization = peewee.ForeignKeyField(Organization, backref="events")
    project = peewee.ForeignKeyField(Project, null=True)
    name = peewee.CharField(max_length=64)
    data = JSONField(default=dict)
    fanned_out = peewee.BooleanField(default=False, index=True)


class WebhookDelivery(BaseModel):
    webhook = peewee.ForeignKeyField(Webhook, backref="deliveries", on_delete="CASCADE")
    event = peewee.ForeignKeyField(Event)
    status = peewee.CharField(max_length=16, default=DeliveryStatus.RETRYING, index=True)
    attempt_count = peewee.IntegerField(default=0)
    next_attempt_at = DateTimeField(null=True, index=True)
    claimed_until = DateTimeField(null=True)
    response_status = peewee.IntegerField(null=True)
    response_body = peewee.TextField(null=True)
    error_reason = peewee.TextField(null=True)
    duration_ms = peewee.IntegerField(null=True)
    delivered_at = DateTimeField(null=True)
