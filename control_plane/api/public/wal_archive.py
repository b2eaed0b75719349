"""An environment's WAL archiving, read: /environments/{id}/wal-archive. Read-only
keys welcome (also on the deployment-operations surface)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.smorest import Blueprint
from control_plane.services.backups import wal as svc

blp = Blueprint("wal_archive", __name__, description="Continuous archiving of the database's WAL")


def _count(description):
    return ma.fields.Integer(required=True, metadata={"description": description})


class WalArchiveSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    enabled = Boolean(required=True, metadata={
        "description": "Archiving follows the backup policy's `enabled`"})
    status = ma.fields.String(required=True, metadata={
        "enum": ["off", "starting", "archiving", "failing"],
        "description": "`starting`: on, until the next deploy sets the database up"})
    error_message = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "Why it is `failing`"})
    archive_timeout_seconds = _count("PostgreSQL finishes a WAL file at least this often")
    files = _count("WAL files in storage")
    bytes = _count("Their compressed size")
    oldest_stored_at = UTCDateTime(allow_none=True, required=True)
    newest_file = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "The newest WAL file in storage"})
    newest_stored_at = UTCDateTime(allow_none=True, required=True)
    pending = _count("Finished WAL files waiting on the server, at its last report")
    lag_seconds = _count("How long the oldest of them has waited (0: none waits)")
    reported_at = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "The agent's last report (every 30 s)"})
    alerted_at = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "Since when `backup.archiving_failed` stands (null: it does not)"})
    window_start = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "The earliest moment a restore's `target_time` may name (the first "
                       "kept backup whose WAL is archived after it without a gap; null: none)"})
    window_end = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "The latest such moment: when PostgreSQL finished the newest WAL "
                       "file archived"})


@blp.route("/environments/<uuid:env_id>/wal-archive")
class WalArchive(MethodView):
    @blp.response(200, WalArchiveSchema)
    def get(self, env_id):
        """An environment's WAL archiving: whether its database's write-ahead log
        reaches backup storage, and how far behind."""
        return svc.get(current_actor(), env_id)
