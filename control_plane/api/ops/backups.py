"""Backups on the deployment-operations surface: an environment's backups (GET,
POST: a manual backup) and a restore (POST .../restore), both tasks."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import Boolean, UTCDateTime
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.ops.deployments import DeploymentSchema
from control_plane.api.public.backups import BackupListArgs, BackupPage, BackupSchema
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import backups as svc

blp = init_blueprint(Blueprint("ops_backups", __name__, description="Backups and restores"))

ERRORS = {
    400: "The backup to restore is not completed (`backup_not_completed`)",
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment or backup not found, in another organization, or (a restore) a backup "
         "of another project (`not_found`)",
    409: "A task is pending or running for the environment (`task_in_progress`), it is "
         "not running (`environment_not_ready`), or a strict or anonymised copy was asked of "
         "an agent older than the control plane (`agent_upgrade_required`)",
    422: "Invalid fields (`validation_error`): `backup_type` other than `manual`; "
         "`neutralize: true`, a profile or `anonymize: true` for a production environment; "
         "a copy less safe than the environment's copy policy",
}


errors = error_responses(blp, ERRORS)


class OpsBackupSchema(BackupSchema):
    task_id = ma.fields.UUID(allow_none=True, required=True, metadata={
        "description": "The backup task (or the restore a safety backup belongs to)"})


class CreateBackupBody(ma.Schema):
    backup_type = ma.fields.String(load_default="manual", validate=ma.validate.OneOf(
        ["manual"], error="Only `manual` backups are taken on request."))
    comment = ma.fields.String(load_default=None, validate=ma.validate.Length(max=1000),
                               metadata={"description": "Kept as the backup's `notes`"})


NEUTRALIZE = ("Whether the restored database is neutralised (Odoo's `odoo neutralize`: "
              "outgoing mail servers and scheduled actions off, payment providers and "
              "carriers in test mode) before the ERP serves it. Default: true for staging and "
              "development environments; a production environment is never neutralised "
              "(`true` is a 422). `false` keeps the copy live, and the task log says who "
              "asked.")


PROFILE = ("How the neutralised copy is checked (every profile fails the restore when "
           "something is still live after neutralising): `standard` (outgoing mail servers, "
           "scheduled actions, payment providers, carriers, known credential parameters) or "
           "`strict` (also incoming mail servers, credential columns, parameters named like "
           "credentials, users' API keys, all cleared first). Default: the environment's copy "
           "policy; a weaker one is a 422.")
ANONYMIZE = ("Rewrite personal data in the copy, irreversibly (partners' names, e-mails, "
             "phones and addresses; users' logins but base's own; message bodies). Default: "
             "the environment's copy policy; `false` where it anonymises is a 422.")


class CopyFields(ma.Schema):
    """What a restore does with the copy: the same fields for a backup and an import."""

    neutralize = Boolean(load_default=None, metadata={"description": NEUTRALIZE})
    neutralize_profile = ma.fields.String(load_default=None, validate=ma.validate.OneOf(
        ["standard", "strict"]), metadata={"description": PROFILE})
    anonymize = Boolean(load_default=None, metadata={"description": ANONYMIZE})


class RestoreBody(CopyFields):
    class Meta:  # exactly one of backup_id and target_time; source_environment_id with the latter
        openapi = {"oneOf": [
            {"required": ["backup_id"], "not": {"anyOf": [
                {"required": ["target_time"]}, {"required": ["source_environment_id"]}]}},
            {"required": ["target_time"], "not": {"required": ["backup_id"]}}]}

    backup_id = ma.fields.UUID(metadata={
        "description": "A completed backup of this environment or of another environment "
                       "of the same project (or `target_time`)"})
    target_time = UTCDateTime(metadata={
        "description": "Instead of `backup_id`: the moment (ISO 8601) the source "
                       "environment's database and filestore are brought back to, within "
                       "its window (`GET .../wal-archive`: `window_start`, `window_end`; "
                       "outside it a 422 names it)"})
    source_environment_id = ma.fields.UUID(metadata={
        "description": "With `target_time`: the environment of the same project read "
                       "(default: this one), e.g. production into a staging copy"})

    @ma.validates_schema(pass_original=True)
    def _one_source(self, data, original, **kwargs):
        given = set(original) if isinstance(original, dict) else set()
        if ("backup_id" in given) == ("target_time" in given):
            why = ["Give either backup_id or target_time."]
            raise ma.ValidationError({"backup_id": why, "target_time": why})
        if "source_environment_id" in given and "target_time" not in given:
            raise ma.ValidationError("Only with target_time.", "source_environment_id")



@blp.route("/environments/<uuid:env_id>/backups")
class EnvironmentBackups(MethodView):
    @errors()
    @blp.arguments(BackupListArgs, location="query")
    @blp.response(200, BackupPage)
    def get(self, args, env_id):
        """List an environment's backups

        Newest first, page pagination (`items`, `total`, `page`, `page_size`,
        `total_pages`), filtered by `status` and `backup_type`. Any member of the
        organization."""
        return svc.list_backups(current_actor(), env_id, **args)

    @errors(403, 409)
    @blp.arguments(CreateBackupBody, required=False)  # every field has a default
    @blp.response(202, OpsBackupSchema)
    def post(self, body, env_id):
        """Take a manual backup

        A `backup` task: the database dump, the filestore archive and a manifest,
        uploaded and verified by the server's agent. Answers at once with the
        backup (`pending`); it becomes `completed` or `failed` (permission
        `project.environments.deploy`)."""
        return svc.take(current_actor(), env_id, berth=current_berth(), **body)


@blp.route("/environments/<uuid:env_id>/restore")
class Restore(MethodView):
    @errors(400, 403, 409, 422)
    @blp.arguments(RestoreBody)
    @blp.response(202, DeploymentSchema)
    def post(self, body, env_id):
        """Restore a backup into the environment

        A `restore` task (its log like a deployment's): a safety backup of the
        environment first (its notes name the restore), then the database and
        filestore of the chosen backup (into a staging or development
        environment, neutralised and checked: `neutralize`, `neutralize_profile`,
        `anonymize`), the ERP restarted and its health checked; on any failure the safety backup is put back. Answers at once with the
        task (permission `project.environments.deploy`)."""
        return svc.restore_into(current_actor(), env_id, body.get("backup_id"), berth=current_berth(),
                                neutralize=body["neutralize"],
                                profile=body["neutralize_profile"], anonymize=body["anonymize"],
                                target_time=body.get("target_time"),
                                source_environment_id=body.get("source_environment_id"))
