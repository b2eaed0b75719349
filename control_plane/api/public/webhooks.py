"""Outgoing webhooks: /webhooks, /webhooks/{id}, its test ping, secret rotation,
delivery log and redelivery."""

import marshmallow as ma
from flask import request
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.idempotency import idempotent
from control_plane.api.pagination import offset_args
from control_plane.api.smorest import REPLAY_DESCRIPTION, Blueprint
from control_plane.events import SUBSCRIBABLE
from control_plane.inputs.url_forms import WEBHOOK_URL_PATTERN
from control_plane.services.webhooks import subscriptions as svc

blp = Blueprint(
    "webhooks", __name__, description=(
        "Outgoing webhooks. Creating, changing, deleting, testing a webhook and rotating its "
        "secret count 10 per 60 s per API key, on top of the key's own limit: past that, "
        "429 `webhook_rate_limit` with `Retry-After` and `retry_after`."))


@blp.before_request
def count_mutation():
    if request.method in ("POST", "PATCH", "DELETE"):
        svc.count_mutation(current_actor(), current_berth().limiter)



EVENTS_DOC = ("Event names, 1 to 10, distinct: " + ", ".join(f"`{e}`" for e in SUBSCRIBABLE)
              + ". The aliases `deployment.started`, `deployment.completed`, `deployment.failed`, "
              "`deployment.cancelled` are accepted and stored as the `deploy.*` name.")


def Url(**kwargs):  # noqa: N802 - a field factory
    return ma.fields.String(validate=ma.validate.Length(1, 2048), metadata={
        "description": "An https URL, at most 2048 characters (also once its host is "
                       "normalized: IDNA, IPv4 written out), without credentials; a fragment "
                       "is dropped. A URL that does not parse as one, or whose host is a "
                       "loopback, private or reserved address or `localhost`, is refused "
                       "with 422 `invalid_webhook_url`.", "pattern": WEBHOOK_URL_PATTERN}, **kwargs)


def Events(**kwargs):  # noqa: N802
    return ma.fields.List(
        ma.fields.String(validate=ma.validate.OneOf(
            svc.ACCEPTED, error="Unknown event {input!r}; accepted: {choices}."),
            # The document lists the names only: an alias and its name in one list
            # are a repeat, which uniqueItems cannot see.
            metadata={"enum": list(SUBSCRIBABLE)}),
        validate=ma.validate.Length(1, svc.MAX_EVENTS),
        metadata={"description": EVENTS_DOC, "uniqueItems": True},
        **kwargs)


Description = ma.fields.String(validate=ma.validate.Length(max=500))
Format = ma.fields.String(validate=ma.validate.OneOf(svc.FORMATS), metadata={
    "description": "`raw` (signed JSON envelope), `blocks`, `cards` or `embed` (chat formats, "
                   "unsigned)."})


class WebhookSchema(Schema):
    id = ma.fields.UUID(required=True)
    url = ma.fields.String(required=True)
    events = ma.fields.List(ma.fields.String(), required=True)
    description = ma.fields.String(required=True)
    project_id = ma.fields.UUID(allow_none=True, required=True)
    is_active = ma.fields.Boolean(required=True)
    format = ma.fields.String(required=True)
    last_triggered_at = UTCDateTime(allow_none=True, required=True)
    failure_count = ma.fields.Integer(required=True)
    created_at = UTCDateTime(required=True)


class WebhookCreatedSchema(WebhookSchema):
    secret = ma.fields.String(required=True, metadata={
        "description": "`whsec_` + base64 of 32 random bytes. Shown this once."})


class WebhookCreateSchema(ma.Schema):
    url = Url(required=True)
    events = Events(required=True)
    description = ma.fields.String(validate=ma.validate.Length(max=500), load_default="")
    project_id = ma.fields.UUID(allow_none=True, metadata={"description": (
        "Only this project's events. Null: organization-wide (organization-scoped keys only). "
        "Omitted: organization-wide, or the key's own project for a project-scoped key.")})
    is_active = Boolean(load_default=True)
    format = ma.fields.String(validate=ma.validate.OneOf(svc.FORMATS), load_default="raw",
                              metadata=Format.metadata)


class WebhookUpdateSchema(ma.Schema):
    url = Url()
    events = Events()
    description = Description
    is_active = Boolean(metadata={
        "description": "`true` re-enables a paused webhook and sets `failure_count` to 0."})
    format = Format


class WebhookPage(ma.Schema):
    items = ma.fields.List(ma.fields.Nested(WebhookSchema), required=True)
    total = ma.fields.Integer(required=True)
    limit = ma.fields.Integer(required=True)
    offset = ma.fields.Integer(required=True)
    has_more = ma.fields.Boolean(required=True)


class PingResultSchema(ma.Schema):
    success = ma.fields.Boolean(required=True)
    status_code = ma.fields.Integer(required=True, metadata={
        "description": "The receiver's HTTP status; 0 when none came (timeout, refused, TLS)."})
    duration_ms = ma.fields.Integer(required=True)
    message = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "Null on success; else why it failed (never the receiver's body)."})


class SecretSchema(ma.Schema):
    secret = ma.fields.String(required=True)


class DeliverySchema(Schema):
    id = ma.fields.UUID(required=True)
    event = ma.fields.String(required=True)
    status = ma.fields.String(required=True, metadata={
        "description": "`delivered`, `failed` or `retrying`."})
    attempt_count = ma.fields.Integer(required=True)
    response_status = ma.fields.Integer(allow_none=True, required=True)
    response_body = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "A snippet of the receiver's last answer."})
    error_reason = ma.fields.String(allow_none=True, required=True)
    duration_ms = ma.fields.Integer(allow_none=True, required=True)
    delivered_at = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "The most recent attempt."})
    created_at = UTCDateTime(required=True, metadata={"description": "The first attempt."})


@blp.route("/webhooks")
class Webhooks(MethodView):
    @blp.arguments(offset_args(50), location="query")
    @blp.response(200, WebhookPage)
    def get(self, args):
        """List the webhooks the key can see, oldest first. Project-scoped keys see
        their project's webhooks only."""
        return svc.list_webhooks(current_actor(), **args)

    @idempotent
    @blp.arguments(WebhookCreateSchema)
    @blp.alt_response(202, schema="TaskAccepted", description=REPLAY_DESCRIPTION)
    @blp.response(201, WebhookCreatedSchema)
    def post(self, body):
        """Create a webhook (full-access key); its `secret` is in this response only.
        At most 100 per organization (409 `webhook_limit_reached`). Event names
        `deployment.*` are stored as their `deploy.*` spelling. Accepts `X-Idempotency-Key`."""
        webhook, secret = svc.create_webhook(current_actor(), current_berth(), **body)
        webhook.secret = secret
        return webhook


@blp.route("/webhooks/<uuid:webhook_id>")
class WebhookById(MethodView):
    @blp.response(200, WebhookSchema)
    def get(self, webhook_id):
        return svc.get_webhook(current_actor(), webhook_id)

    @blp.arguments(WebhookUpdateSchema, required=False)  # no body: nothing changes
    @blp.response(200, WebhookSchema)
    def patch(self, body, webhook_id):
        """Change a webhook (full-access key); omitted fields stay, `events` replaces
        the list. Answers the updated webhook."""
        return svc.update_webhook(current_actor(), current_berth(), webhook_id, body)

    @blp.response(204)
    def delete(self, webhook_id):
        """Delete a webhook and its delivery history (full-access key)."""
        svc.delete_webhook(current_actor(), webhook_id)


@blp.route("/webhooks/<uuid:webhook_id>/test", methods=["POST"])
@blp.response(200, PingResultSchema)
def test_webhook(webhook_id):
    """Send a `ping` event now and report the receiver's answer (full-access key).
    Writes no delivery entry; works on paused webhooks too."""
    return svc.ping(current_actor(), current_berth(), webhook_id)


@blp.route("/webhooks/<uuid:webhook_id>/rotate-secret", methods=["POST"])
@blp.response(200, SecretSchema)
def rotate_secret(webhook_id):
    """A new secret (shown once); the old one is invalid at once (full-access key)."""
    return svc.rotate_secret(current_actor(), webhook_id)


@blp.route("/webhooks/<uuid:webhook_id>/deliveries")
@blp.response(200, DeliverySchema(many=True))
def deliveries(webhook_id):
    """The 50 most recent deliveries, newest first."""
    return svc.deliveries(current_actor(), webhook_id)


@blp.route("/webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/redeliver",
           methods=["POST"])
@blp.response(201, DeliverySchema)
def redeliver(webhook_id, delivery_id):
    """Send a delivery's event again, now, as a new delivery with its own five
    attempts (full-access key). Answers the new delivery; the old one stays in the
    log as it ended."""
    return svc.redeliver(current_actor(), webhook_id, delivery_id)
