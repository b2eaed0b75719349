"""Restore drills on the deployment-operations surface: start one (POST) and list
them (GET) at /environments/{id}/drills."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import UTCDateTime
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.pagination import PageArgs
from control_plane.api.public.drills import DrillPage, DrillSchema
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import drills as svc

blp = init_blueprint(Blueprint("ops_drills", __name__, description="Restore drills"))

ERRORS = {
    400: "The backup is not completed (`backup_not_completed`)",
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment or backup not found, in another organization, or a backup of "
         "another environment (`not_found`)",
    409: "A task is pending or running for the environment (`task_in_progress`), it is not "
         "running (`environment_not_ready`), it has no completed backup "
         "(`no_completed_backup`), or its server's agent is older than the control plane "
         "(`agent_upgrade_required`)",
    422: "Invalid fields (`validation_error`)",
}

errors = error_responses(blp, ERRORS)


class DrillBody(ma.Schema):
    class Meta:  # backup_id or target_time, not both
        openapi = {"not": {"required": ["backup_id", "target_time"]}}

    backup_id = ma.fields.UUID(load_default=None, metadata={
        "description": "A completed backup of this environment; default: its newest"})
    target_time = UTCDateTime(metadata={
        "description": "Instead: a moment of the environment's point-in-time window, "
                       "restored from a base backup and the archived WAL (outside the "
                       "window: a 422 that names it)"})

    @ma.validates_schema(pass_original=True)
    def _one(self, data, original, **kwargs):
        if isinstance(original, dict) and {"backup_id", "target_time"} <= set(original):
            raise ma.ValidationError("Give backup_id or target_time, not both.", "backup_id")


@blp.route("/environments/<uuid:env_id>/drills")
class Drills(MethodView):
    @errors()
    @blp.arguments(PageArgs, location="query")
    @blp.response(200, DrillPage)
    def get(self, args, env_id):
        """List an environment's restore drills

        Newest first, page pagination. Any member of the organization."""
        return svc.page(current_actor(), env_id, **args)

    @errors(400, 403, 409, 422)
    @blp.arguments(DrillBody, required=False)  # every field has a default
    @blp.response(202, DrillSchema)
    def post(self, body, env_id):
        """Start a restore drill

        A `drill` task: the server's agent restores the backup into a
        throwaway copy beside the environment (its own database container
        without a network, an ERP that nothing routes to), neutralises and
        checks it, waits for its health check, checks every table's rows against
        the dump and every stored attachment against its checksum, then removes
        it. The environment serves on, untouched. Answers at once; the drill
        becomes `passed` or `failed` (`backup.drill_completed`,
        `backup.drill_failed`). Permission `project.environments.deploy`."""
        return svc.drill_now(current_actor(), env_id, berth=current_berth(),
                             backup_id=body["backup_id"], target_time=body.get("target_time"))
