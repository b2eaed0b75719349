"""Restore drills, read: /environments/{id}/drills (a page, newest first). Read-only
keys welcome; a drill is started on the deployment-operations surface."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.pagination import PageArgs
from control_plane.api.smorest import Blueprint
from control_plane.services.backups import drills as svc

blp = Blueprint("drills", __name__, description="Restore drills")


class DrillSchema(Schema):
    id = ma.fields.UUID(required=True, metadata={"description": "The drill's task"})
    environment_id = ma.fields.UUID(required=True)
    backup_id = ma.fields.UUID(required=True, metadata={
        "description": "The backup drilled (with `target_time`: the base backup recovered)"})
    target_time = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "The moment drilled, from a base backup and the archived WAL "
                       "(null: the backup as it was taken)"})
    status = ma.fields.String(required=True, metadata={
        "enum": ["pending", "running", "passed", "failed", "cancelled"]})
    trigger = ma.fields.String(required=True, metadata={
        "description": "`manual`, or `scheduled` (the weekly drill of the backup policy)"})
    restore_seconds = ma.fields.Float(allow_none=True, required=True, metadata={
        "description": "Time to restore: from the drill's start until the copy's ERP "
                       "answered its health check"})
    tables = ma.fields.Integer(allow_none=True, required=True, metadata={
        "description": "Tables loaded, each with as many rows as the dump has for it"})
    rows = ma.fields.Integer(allow_none=True, required=True)
    attachments = ma.fields.Integer(allow_none=True, required=True, metadata={
        "description": "Stored attachments found in the copy's filestore, each hashing to "
                       "its checksum (when the drill passed)"})
    error_message = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "Why a failed drill failed: what did not restore, serve or check"})
    created_at = UTCDateTime(required=True)
    completed_at = UTCDateTime(allow_none=True, required=True)


class DrillPage(ma.Schema):
    items = ma.fields.Nested(DrillSchema, many=True, required=True)
    total = ma.fields.Integer(required=True)
    page = ma.fields.Integer(required=True)
    page_size = ma.fields.Integer(required=True)
    total_pages = ma.fields.Integer(required=True)


@blp.route("/environments/<uuid:env_id>/drills")
class EnvironmentDrills(MethodView):
    @blp.arguments(PageArgs, location="query")
    @blp.response(200, DrillPage)
    def get(self, args, env_id):
        """An environment's restore drills, newest first (page pagination)."""
        return svc.page(current_actor(), env_id, **args)
