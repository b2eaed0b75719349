"""Notification channels: /notification-channels, /notification-channels/{id}, its
test message and delivery log."""

import marshmallow as ma
from flask import request
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.idempotency import idempotent
from control_plane.api.pagination import offset_args
from control_plane.api.public.webhooks import DeliverySchema, PingResultSchema
from control_plane.api.smorest import REPLAY_DESCRIPTION, Blueprint
from control_plane.events import SUBSCRIBABLE
from control_plane.services.webhooks import channel_types
from control_plane.services.webhooks import channels as svc


def _settings_doc():
    parts = []
    for kind, schema in channel_types.SCHEMAS.items():
        fields = ", ".join(
            f"`{name}`" + (" (required)" if f.required else "")
            + (" (secret)" if f.metadata.get("secret") else "")
            for name, f in schema().fields.items())
        parts.append(f"`{kind}`: {fields}")
    return ("The type's settings. " + "; ".join(parts) + ". Secret settings are sealed and "
            "never shown again; URLs are https and checked as webhook URLs are.")


blp = Blueprint(
    "notification_channels", __name__, description=(
        "Notification channels: events delivered in a service's own format (e-mail, Slack, "
        "Discord, Microsoft Teams, Telegram, Matrix, ntfy), with the webhooks' retries and "
        "auto-pause. Creating, changing, deleting and testing a channel count 10 per 60 s per "
        "API key, on top of the key's own limit: past that, 429 `channel_rate_limit`."))


@blp.before_request
def count_mutation():
    if request.method in ("POST", "PATCH", "DELETE"):
        svc.count_mutation(current_actor(), current_berth().limiter)


Type = ma.fields.String(validate=ma.validate.OneOf(channel_types.TYPES), metadata={
    "description": "`" + "`, `".join(channel_types.TYPES) + "`."})
Settings = ma.fields.Dict(keys=ma.fields.String(), metadata={"description": _settings_doc()})
Events = ma.fields.List(
    ma.fields.String(validate=ma.validate.OneOf(svc.subscriptions.ACCEPTED),
                     metadata={"enum": list(SUBSCRIBABLE)}),
    validate=ma.validate.Length(1, svc.MAX_EVENTS),
    metadata={"description": "Event names, as webhooks take them (any number of the "
                             "subscribable names, distinct).", "uniqueItems": True})
Description = ma.fields.String(validate=ma.validate.Length(max=500))


class NotificationChannelSchema(Schema):
    id = ma.fields.UUID(required=True)
    type = ma.fields.String(attribute="channel", required=True)
    destination = ma.fields.String(attribute="url", required=True, metadata={
        "description": "Where it sends, without its secrets (`mailto:` addresses, a host)."})
    settings = ma.fields.Dict(attribute="options", required=True, metadata={
        "description": "The settings that are not secret."})
    events = ma.fields.List(ma.fields.String(), required=True)
    description = ma.fields.String(required=True)
    project_id = ma.fields.UUID(allow_none=True, required=True)
    is_active = ma.fields.Boolean(required=True)
    last_triggered_at = UTCDateTime(allow_none=True, required=True)
    failure_count = ma.fields.Integer(required=True)
    created_at = UTCDateTime(required=True)


class NotificationChannelCreateSchema(ma.Schema):
    type = ma.fields.String(required=True, validate=Type.validate, metadata=Type.metadata)
    settings = ma.fields.Dict(keys=ma.fields.String(), required=True,
                              metadata=Settings.metadata)
    events = ma.fields.List(Events.inner, required=True, validate=Events.validate,
                            metadata=Events.metadata)
    description = ma.fields.String(validate=ma.validate.Length(max=500), load_default="")
    project_id = ma.fields.UUID(allow_none=True, metadata={"description": (
        "Only this project's events. Null: organization-wide (organization-scoped keys only). "
        "Omitted: organization-wide, or the key's own project for a project-scoped key.")})
    is_active = Boolean(load_default=True)


class NotificationChannelUpdateSchema(ma.Schema):
    settings = ma.fields.Dict(keys=ma.fields.String(), metadata={"description": (
        "Merged over the stored settings (a secret left out is kept), then checked whole.")})
    events = ma.fields.List(Events.inner, validate=Events.validate, metadata=Events.metadata)
    description = Description
    is_active = Boolean(metadata={
        "description": "`true` resumes a paused channel and sets `failure_count` to 0."})


class NotificationChannelPage(ma.Schema):
    items = ma.fields.List(ma.fields.Nested(NotificationChannelSchema), required=True)
    total = ma.fields.Integer(required=True)
    limit = ma.fields.Integer(required=True)
    offset = ma.fields.Integer(required=True)
    has_more = ma.fields.Boolean(required=True)


@blp.route("/notification-channels")
class Channels(MethodView):
    @blp.arguments(offset_args(50), location="query")
    @blp.response(200, NotificationChannelPage)
    def get(self, args):
        """List the notification channels the key can see, oldest first."""
        return svc.list_channels(current_actor(), **args)

    @idempotent
    @blp.arguments(NotificationChannelCreateSchema)
    @blp.alt_response(202, schema="TaskAccepted", description=REPLAY_DESCRIPTION)
    @blp.response(201, NotificationChannelSchema)
    def post(self, body):
        """Create a notification channel (full-access key). At most 100 per organization
        (409 `channel_limit_reached`). An `email` channel needs the control plane's SMTP
        server. Accepts `X-Idempotency-Key`."""
        return svc.create_channel(current_actor(), current_berth(), **body)


@blp.route("/notification-channels/<uuid:channel_id>")
class ChannelById(MethodView):
    @blp.response(200, NotificationChannelSchema)
    def get(self, channel_id):
        return svc.get_channel(current_actor(), channel_id)

    @blp.arguments(NotificationChannelUpdateSchema, required=False)
    @blp.response(200, NotificationChannelSchema)
    def patch(self, body, channel_id):
        """Change a channel (full-access key); omitted fields stay."""
        return svc.update_channel(current_actor(), current_berth(), channel_id, body)

    @blp.response(204)
    def delete(self, channel_id):
        """Delete a channel and its delivery log (full-access key)."""
        svc.delete_channel(current_actor(), channel_id)


@blp.route("/notification-channels/<uuid:channel_id>/test", methods=["POST"])
@blp.response(200, PingResultSchema)
def test_channel(channel_id):
    """Send a test message now and report how it went (full-access key). Writes no
    delivery entry; works on paused channels too. For e-mail, `status_code` is the
    SMTP server's reply code."""
    return svc.test_channel(current_actor(), current_berth(), channel_id)


@blp.route("/notification-channels/<uuid:channel_id>/deliveries")
@blp.response(200, DeliverySchema(many=True))
def deliveries(channel_id):
    """The 50 most recent deliveries, newest first."""
    return svc.deliveries(current_actor(), channel_id)
