"""An environment's backup policy on the deployment-operations surface: when
its scheduled backups are taken and how many copies are kept."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import policy as svc

blp = init_blueprint(Blueprint("ops_backup_policy", __name__,
                               description="Scheduled backups and their retention"))

ERRORS = {
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment not found or in another organization (`not_found`)",
    422: "Invalid fields (`validation_error`); nothing changes",
}
TIME = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"


def _keep(what, default):
    return ma.fields.Integer(strict=True, validate=ma.validate.Range(0, 365), metadata={
        "description": f"How many {what} copies are kept (0 to 365; default {default})"})


class PolicySchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    enabled = ma.fields.Boolean(required=True, metadata={
        "description": "Scheduled backups are taken (default: on for `production` "
                       "environments, off for the others)"})
    time_of_day = ma.fields.String(required=True, metadata={
        "description": "When the daily backup starts, UTC, HH:MM (default 02:00)"})
    keep_daily = ma.fields.Integer(required=True)
    keep_weekly = ma.fields.Integer(required=True)
    keep_monthly = ma.fields.Integer(required=True)
    last_scheduled_for = UTCDateTime(required=True, allow_none=True, metadata={
        "description": "The last daily slot a scheduled backup was started for"})
    next_run_at = UTCDateTime(required=True, allow_none=True, metadata={
        "description": "When the next scheduled backup is due (null when disabled)"})
    drills_enabled = ma.fields.Boolean(required=True, metadata={
        "description": "A restore drill of the newest completed backup runs weekly "
                       "(default: on for `production` environments, off for the others)"})
    last_drill_scheduled_for = UTCDateTime(required=True, allow_none=True, metadata={
        "description": "When the last scheduled drill was started"})
    next_drill_at = UTCDateTime(required=True, allow_none=True, metadata={
        "description": "When the next scheduled drill is due (null when drills are off); it "
                       "starts once the environment runs, is idle and has a completed backup"})


class PolicyBody(ma.Schema):
    """Any of the fields; those left out keep their value."""

    enabled = Boolean(metadata={"description": "A JSON boolean"})
    time_of_day = ma.fields.String(validate=ma.validate.Regexp(
        TIME, error="A time of day, UTC, as HH:MM (00:00 to 23:59)."),
        metadata={"pattern": TIME})
    keep_daily = _keep("daily", 7)
    keep_weekly = _keep("weekly", 4)
    keep_monthly = _keep("monthly", 3)
    drills_enabled = Boolean(metadata={"description": "A JSON boolean: weekly restore drills"})


errors = error_responses(blp, ERRORS)


@blp.route("/environments/<uuid:env_id>/backup-policy")
class BackupPolicy(MethodView):
    @errors()
    @blp.response(200, PolicySchema)
    def get(self, env_id):
        """Read an environment's backup policy

        Any member of the organization."""
        return svc.get(current_actor(), env_id)

    @errors(403, 422)
    @blp.arguments(PolicyBody, required=False)  # no body: nothing changes
    @blp.response(200, PolicySchema)
    def put(self, body, env_id):
        """Change an environment's backup policy

        The fields given change; the others keep their value. A scheduled
        backup is taken once a day at `time_of_day` (UTC) while the environment
        runs; a daily copy is kept `keep_daily` days, the first of each ISO week
        `keep_weekly` weeks and the first of each month `keep_monthly` months,
        and the expiry of its scheduled backups follows at once (permission
        `project.environments.deploy`)."""
        return svc.update(current_actor(), env_id, body)
