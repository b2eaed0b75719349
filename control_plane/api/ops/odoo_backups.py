"""Odoo's own backup format on the deployment-operations surface: a backup
exported as Odoo's zip (POST/GET /backups/{id}/export), and a file imported
into an environment as a restore (/environments/{id}/imports …). The
protocol is in services/backups/odoo.py and docs/decisions.md."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.ops.auth import audited_read, current_actor, init_blueprint
from control_plane.api.ops.backups import CopyFields
from control_plane.api.ops.deployments import DeploymentSchema
from control_plane.api.public.backups import DownloadArgs
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import odoo as svc

blp = init_blueprint(Blueprint("ops_odoo_backups", __name__,
                               description="Odoo's backup zip: export and import"))

ERRORS = {
    400: "The backup is not completed (`backup_not_completed`); for …/complete, a part "
         "listed was not uploaded or its ETag differs (`invalid_part`)",
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Backup, environment or import not found, or in another organization (`not_found`); "
         "for GET …/export, no export of the backup yet (`export_not_found`)",
    409: "A task is pending or running for the environment (`task_in_progress`), it is not "
         "running (`environment_not_ready`), the export is running (`export_in_progress`), "
         "or the import's upload is not complete (`import_not_uploaded`) or already is "
         "(`import_uploaded`); for …/restore, a strict or anonymised copy asked of an agent "
         "older than the control plane (`agent_upgrade_required`)",
    422: "Invalid fields (`validation_error`); for …/restore, `neutralize: true`, a profile "
         "or `anonymize: true` for a production environment, or a copy less safe than the "
         "environment's copy policy",
}


errors = error_responses(blp, ERRORS, always=(401, 403, 404))



class ExportSchema(Schema):
    url = ma.fields.String(required=True, metadata={
        "description": "A plain GET of the zip, no auth header, Range supported"})
    expires_at = UTCDateTime(required=True)
    filename = ma.fields.String(required=True)
    size = ma.fields.Integer(allow_none=True, required=True, metadata={"description": "Bytes"})
    use_streaming = ma.fields.Boolean(required=True, metadata={
        "description": "True when the URL streams through the control plane (local storage)"})


@blp.route("/backups/<uuid:backup_id>/export")
class Export(MethodView):
    @errors(400, 409)
    @blp.response(202, DeploymentSchema)
    def post(self, backup_id):
        """Export a backup as Odoo's zip

        An `export` task on the backup's environment (running, no other task):
        its agent writes `dump.sql` (plain SQL), `filestore/` and `manifest.json`,
        the zip Odoo's database manager and Odoo.sh restore, streamed into
        storage beside the backup. Answers at once with the task; GET this path
        once it succeeded."""
        return svc.start_export(current_actor(), backup_id, berth=current_berth())

    @errors(409, 422)
    @blp.arguments(DownloadArgs, location="query")
    @blp.response(200, ExportSchema)
    def get(self, args, backup_id):
        """The exported zip's download URL

        Valid `expires_in` seconds (300 to 86400, default 3600). 409
        `export_in_progress` while an export runs; 404 `export_not_found`
        before one succeeded."""
        audited_read()
        return svc.export_url(current_actor(), backup_id, current_berth(), args["expires_in"])


class ImportSchema(Schema):
    import_id = ma.fields.UUID(required=True, attribute="id")
    environment_id = ma.fields.UUID(required=True)
    status = ma.fields.Function(svc.import_status, required=True, metadata={
        "description": "uploading, uploaded, restoring, restored or failed (its restore "
                       "task, `task_id`, says why)"})
    filename = ma.fields.String(allow_none=True, required=True)
    size = ma.fields.Integer(allow_none=True, required=True)
    task_id = ma.fields.UUID(allow_none=True, required=True, metadata={
        "description": "Its newest restore task"})
    created_at = UTCDateTime(required=True)
    uploaded_at = UTCDateTime(allow_none=True, required=True)
    upload = ma.fields.Function(lambda imp: {
        "max_part_size": svc.PART_MAX, "min_part_size": svc.PART_MIN,
        "max_parts": svc.MAX_PARTS}, required=True, metadata={
        "description": "Parts: at most `max_part_size` bytes each, all but the last at "
                       "least `min_part_size`, numbered 1 to `max_parts`"})


class CreateImportBody(ma.Schema):
    filename = ma.fields.String(load_default=None, validate=ma.validate.Length(max=255),
                                metadata={"description": "Kept for the record only"})


class PartBody(ma.Schema):
    part_number = ma.fields.Integer(required=True, strict=True,
                                    validate=ma.validate.Range(1, svc.MAX_PARTS))


class PartUrlSchema(Schema):
    part_number = ma.fields.Integer(required=True)
    url = ma.fields.String(required=True, metadata={
        "description": "PUT the part's bytes here (single use); keep the ETag answered"})
    expires_at = UTCDateTime(required=True)


class CompletedPart(ma.Schema):
    part_number = ma.fields.Integer(required=True, strict=True,
                                    validate=ma.validate.Range(1, svc.MAX_PARTS))
    etag = ma.fields.String(required=True, validate=ma.validate.Length(1, 256))


class CompleteBody(ma.Schema):
    parts = ma.fields.List(ma.fields.Nested(CompletedPart), required=True,
                           validate=ma.validate.Length(1, svc.MAX_PARTS))


@blp.route("/environments/<uuid:env_id>/imports")
class Imports(MethodView):
    @errors(422)
    @blp.arguments(CreateImportBody, required=False)  # every field has a default
    @blp.response(201, ImportSchema)
    def post(self, body, env_id):
        """Begin an import

        An Odoo backup zip (`dump.sql`, `filestore/`, `manifest.json`), a
        custom-format dump (`pg_dump -Fc`) or a plain SQL dump, uploaded in
        parts: POST …/parts for each part's URL, PUT the part there, then POST
        …/complete with the parts' ETags, then POST …/restore."""
        return svc.create_import(current_actor(), env_id, berth=current_berth(), **body)


@blp.route("/environments/<uuid:env_id>/imports/<uuid:import_id>")
class Import(MethodView):
    @errors()
    @blp.response(200, ImportSchema)
    def get(self, env_id, import_id):
        """An import and its status"""
        return svc.get_import(current_actor(), env_id, import_id)


@blp.route("/environments/<uuid:env_id>/imports/<uuid:import_id>/parts")
class ImportParts(MethodView):
    @errors(409, 422)
    @blp.arguments(PartBody)
    @blp.response(200, PartUrlSchema)
    def post(self, body, env_id, import_id):
        """A URL for one part of the upload

        Valid one hour, for one PUT; asking again for the same part number
        gives a new URL (the last PUT of a number counts)."""
        return svc.part_url(current_actor(), env_id, import_id, body["part_number"],
                            berth=current_berth())


@blp.route("/environments/<uuid:env_id>/imports/<uuid:import_id>/complete")
class ImportComplete(MethodView):
    @errors(400, 409, 422)
    @blp.arguments(CompleteBody)
    @blp.response(200, ImportSchema)
    def post(self, body, env_id, import_id):
        """Complete the upload

        The parts (their numbers and the ETags their PUTs answered) joined
        into the stored file."""
        return svc.complete_import(current_actor(), env_id, import_id, body["parts"],
                                   berth=current_berth())


class ImportRestoreBody(CopyFields):
    pass


@blp.route("/environments/<uuid:env_id>/imports/<uuid:import_id>/restore")
class ImportRestore(MethodView):
    @errors(409, 422)
    @blp.arguments(ImportRestoreBody, required=False)  # every field has a default
    @blp.response(202, DeploymentSchema)
    def post(self, body, env_id, import_id):
        """Restore the environment from the import

        A `restore` task: the agent inspects the upload first and refuses a
        hostile or unusable one (the task fails with the reason's code:
        `import_unsafe_member`, `import_zip_bomb`, `import_version_mismatch`,
        `import_not_a_dump`, `import_unrecognised`, …) with the environment
        untouched; otherwise a safety backup, then the database and filestore
        from the upload, the ERP restarted and its health checked, the safety
        backup put back on any failure. Into a staging or development
        environment the restored database is neutralised (`neutralize`). The
        body is optional."""
        return svc.restore_import(current_actor(), env_id, import_id, berth=current_berth(),
                                  neutralize=body["neutralize"],
                                  profile=body["neutralize_profile"], anonymize=body["anonymize"])

