"""/environments/{id}/size: what the environment's size is made of, its backups'
stored sizes and its growth over the last day (read-only keys welcome)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.smorest import Blueprint
from control_plane.services.servers import sizes as svc

blp = Blueprint("sizes", __name__, description="Size and growth")

_MEASURED = " As the agent last measured it (null: not measured yet, or by an older agent)."


class TableSizeSchema(Schema):
    name = ma.fields.String(required=True)
    bytes = ma.fields.Integer(required=True, metadata={
        "description": "With its indexes and TOAST (pg_total_relation_size)."})
    rows = ma.fields.Integer(required=True, metadata={
        "description": "PostgreSQL's estimate (-1: not analysed yet)."})


class BackupSizeSchema(Schema):
    id = ma.fields.UUID(required=True)
    created_at = UTCDateTime(required=True)
    total_size = ma.fields.Integer(required=True)
    compressed_size = ma.fields.Integer(required=True)


class GrowthSchema(Schema):
    since = UTCDateTime(required=True, metadata={
        "description": "The metric history's point the growth is measured from (about a "
                       "day before the last measurement)."})
    database_bytes_per_day = ma.fields.Integer(required=True, allow_none=True)
    filestore_bytes_per_day = ma.fields.Integer(required=True, allow_none=True)


class EnvironmentSizeSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    measured_at = UTCDateTime(required=True, allow_none=True)
    database_bytes = ma.fields.Integer(required=True, allow_none=True)
    filestore_bytes = ma.fields.Integer(required=True, allow_none=True)
    addons_bytes = ma.fields.Integer(required=True, allow_none=True)
    largest_tables = ma.fields.List(ma.fields.Nested(TableSizeSchema), required=True,
                                    allow_none=True, metadata={
                                        "description": "Largest first, at most 10." + _MEASURED})
    filestore_files = ma.fields.Integer(required=True, allow_none=True, metadata={
        "description": "Files in the ERP database's filestore." + _MEASURED})
    attachments_missing = ma.fields.Integer(required=True, allow_none=True, metadata={
        "description": "Attachments (ir_attachment) whose file is not in the filestore."
                       + _MEASURED})
    files_orphaned = ma.fields.Integer(required=True, allow_none=True, metadata={
        "description": "Filestore files no attachment names." + _MEASURED})
    missing_sample = ma.fields.List(ma.fields.String(), required=True, allow_none=True,
                                    metadata={"description": "Up to 10 missing files' names "
                                                             "(store_fname)." + _MEASURED})
    backups = ma.fields.List(ma.fields.Nested(BackupSizeSchema), required=True, metadata={
        "description": "The 10 newest completed backups, newest first."})
    growth = ma.fields.Nested(GrowthSchema, required=True, allow_none=True, metadata={
        "description": "Over about the last day (null: no history a day old yet, or a "
                       "server reached over SSH)."})


@blp.route("/environments/<uuid:env_id>/size")
class EnvironmentSize(MethodView):
    @blp.response(200, EnvironmentSizeSchema)
    def get(self, env_id):
        """What the environment's size is made of and how fast it grows."""
        return svc.size_report(current_actor(), env_id)
