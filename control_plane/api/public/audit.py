"""/audit-events: the organization's audit log (organization-scoped keys; read-only
keys welcome)."""


import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime, UTCInstant
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint
from control_plane.services import audit as svc

blp = Blueprint("audit", __name__, description="Audit log")

_NAME = ma.validate.Length(1, 64)


class AuditArgs(CursorArgs):
    action = ma.fields.String(validate=_NAME, metadata={
        "description": "e.g. `project.update`; a family with `.*`: `webhook.*` is every "
                       "action starting `webhook.`"})
    actor_type = ma.fields.String(validate=ma.validate.OneOf(["api_key", "user", "operator"]))
    actor_id = ma.fields.String(validate=_NAME, metadata={
        "description": "The key's public id, the user's id or the operator's name."})
    target_type = ma.fields.String(validate=_NAME, metadata={"description": "e.g. `project`"})
    target_id = ma.fields.String(validate=_NAME)
    from_ = UTCInstant(data_key="from", metadata={
        "description": "Events at or after this time (ISO 8601, UTC when no offset)."})
    to = UTCInstant(metadata={
        "description": "Events before this time."})


class ActorSchema(Schema):
    type = ma.fields.String(required=True, metadata={"enum": ["api_key", "user", "operator"]})
    id = ma.fields.String(allow_none=True, required=True)
    name = ma.fields.String(allow_none=True, required=True)


class AuditEventSchema(Schema):
    id = ma.fields.UUID(required=True)
    created_at = UTCDateTime(required=True)
    action = ma.fields.String(required=True)
    actor = ma.fields.Nested(ActorSchema, required=True)
    target_type = ma.fields.String(required=True)
    target_id = ma.fields.String(allow_none=True, required=True)
    changes = ma.fields.Dict(allow_none=True, required=True, metadata={
        "description": "What was asked, every secret left out."})
    source_ip = ma.fields.String(allow_none=True, required=True)
    request_id = ma.fields.String(allow_none=True, required=True)


AuditPage = cursor_page_schema(AuditEventSchema, "AuditEventPage")


@blp.route("/audit-events")
class AuditEvents(MethodView):
    @blp.arguments(AuditArgs, location="query")
    @blp.response(200, AuditPage)
    def get(self, args):
        """The organization's audit log, newest first: who changed what, through the
        APIs or the admin CLI, kept 90 days. Needs an organization-scoped key."""
        rows, meta = svc.list_events(current_actor(), since=args.pop("from_", None),
                                     until=args.pop("to", None), **args)
        return {"data": rows, "pagination": meta}
