"""Backups: /environments/{id}/backups (a page, newest first) and
/backups/{id}/download (URLs for a plain GET). Read-only keys welcome."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import audited_read, current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.pagination import PageArgs
from control_plane.api.smorest import Blueprint, ErrorSchema
from control_plane.services.backups import backups as svc
from control_plane.vocabulary import states

blp = Blueprint("backups", __name__, description="Backups")


class BackupSchema(Schema):
    id = ma.fields.UUID(required=True)
    environment_id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": [s.value for s in states.BackupStatus]})
    backup_type = ma.fields.String(required=True, metadata={
        "enum": [t.value for t in states.BackupType]})
    database_size = ma.fields.Integer(required=True)
    filestore_size = ma.fields.Integer(required=True)
    total_size = ma.fields.Integer(required=True)
    compressed_size = ma.fields.Integer(required=True)
    started_at = UTCDateTime(allow_none=True, required=True)
    completed_at = UTCDateTime(allow_none=True, required=True)
    duration_seconds = ma.fields.Integer(allow_none=True, required=True)
    expires_at = UTCDateTime(allow_none=True, required=True)
    is_verified = ma.fields.Boolean(required=True)
    verified_at = UTCDateTime(allow_none=True, required=True)
    notes = ma.fields.String(allow_none=True, required=True)
    error_message = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "Why a failed backup failed; null otherwise"})
    created_at = UTCDateTime(required=True)


class BackupPage(ma.Schema):
    items = ma.fields.Nested(BackupSchema, many=True, required=True)
    total = ma.fields.Integer(required=True)
    page = ma.fields.Integer(required=True)
    page_size = ma.fields.Integer(required=True)
    total_pages = ma.fields.Integer(required=True)


class BackupListArgs(PageArgs):
    status = ma.fields.String(load_default=None, validate=ma.validate.OneOf(
        [s.value for s in states.BackupStatus]))
    backup_type = ma.fields.String(load_default=None, validate=ma.validate.OneOf(
        [t.value for t in states.BackupType]))


class DownloadArgs(ma.Schema):
    expires_in = ma.fields.Integer(load_default=3600, validate=ma.validate.Range(300, 86400),
                                   metadata={"description": "Seconds the URLs stay valid"})


class DownloadSchema(Schema):
    backup_id = ma.fields.UUID(required=True)
    database_url = ma.fields.String(required=True)
    filestore_url = ma.fields.String(required=True)
    manifest_url = ma.fields.String(required=True)
    expires_in = ma.fields.Integer(required=True)
    expires_at = UTCDateTime(required=True)
    use_streaming = ma.fields.Boolean(required=True, metadata={
        "description": "True when the URLs stream through the control plane (local storage); "
                       "false for presigned URLs of the S3 store"})


@blp.route("/environments/<uuid:env_id>/backups")
class EnvironmentBackups(MethodView):
    @blp.arguments(BackupListArgs, location="query")
    @blp.response(200, BackupPage)
    def get(self, args, env_id):
        """An environment's backups, newest first (page pagination)."""
        return svc.list_backups(current_actor(), env_id, **args)


@blp.route("/backups/<uuid:backup_id>/download")
class BackupDownload(MethodView):
    @blp.arguments(DownloadArgs, location="query")
    @blp.alt_response(400, schema=ErrorSchema, description=(
        "`backup_not_completed`: only a completed backup can be downloaded"))
    @blp.response(200, DownloadSchema)
    def get(self, args, backup_id):
        """URLs for the backup's database dump, filestore archive and manifest: a
        plain GET, no auth header, HTTP range requests allowed."""
        audited_read()
        return svc.download(current_actor(), backup_id, current_berth(),
                            args["expires_in"])
