"""Deployment operations: retry, cancel, rollback, deploy, destroy, manual
deployments, the deployment list, and per-environment settings."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import (
    Anonymized,
    Boolean,
    Branch,
    EnvironmentStatus,
    Neutralized,
    QueryBoolean,
    Schema,
    UTCDateTime,
)
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.deploys import operations as svc
from control_plane.vocabulary import states
from protocol.kinds import TaskKind

blp = init_blueprint(Blueprint("operations", __name__, description="Deployment operations"))

ERRORS = {
    400: "The deployment's status does not allow this (`deployment_not_failed`, "
         "`deployment_not_cancellable`, `rollback_not_allowed`), or a malformed body",
    401: "Missing, invalid, revoked or expired user token (`missing_token`, `invalid_token`, "
         "`token_expired`)",
    403: "The user lacks the permission (`permission_denied`)",
    404: "Not found, or in another organization (`not_found`)",
    409: "A deployment is already pending or running for the environment "
         "(`deployment_in_progress`), or the environment's status does not allow it "
         "(`invalid_transition`)",
    422: "Invalid fields (`validation_error`, with `details`)",
    429: "Per-organization limit: 10 deployments a minute, 10 manual retries a minute "
         "(`target_rate_limit`); `Retry-After` header and `retry_after` field",
    502: "The server is not connected (`server_unreachable`; nothing changed) or its agent "
         "could not destroy the environment (`destroy_failed`)",
    504: "The agent did not answer in time (`destroy_timeout`, with `deployment_id`); the "
         "destroy goes on and completes when the agent answers",
}


errors = error_responses(blp, ERRORS)



class DeploymentSchema(Schema):
    id = ma.fields.UUID(required=True)
    project_id = ma.fields.UUID(required=True)
    environment_id = ma.fields.UUID(required=True)
    version = ma.fields.Integer(required=True, allow_none=True, metadata={
        "description": "1, 2, 3… per environment, counting deployments only; null for the "
                       "tasks that are not deployments (backup, restore, export)"})
    kind = ma.fields.String(required=True, metadata={
        "enum": [k.value for k in TaskKind],
        "description": "backup, restore and export are the tasks of backups, not deployments: "
                       "never retried or rolled back to"})
    status = ma.fields.String(required=True, metadata={"description": ", ".join(svc.STATUSES)})
    trigger = ma.fields.String(required=True, metadata={
        "enum": [t.value for t in states.Trigger]})
    git_commit = ma.fields.String(allow_none=True, required=True)
    git_branch = ma.fields.String(allow_none=True, required=True)
    rollback_from_id = ma.fields.UUID(allow_none=True, required=True, metadata={
        "description": "A rollback's target"})
    extra_data = ma.fields.Dict(required=True, metadata={
        "description": "`retry_of` (a retry), `rollback_to` and `rollback_to_version` (a "
                       "rollback), `cancelled_by` and `cancelled_at` (a cancel), `delete_data`, "
                       "`deleted_containers`, `deleted_database`, `deleted_data` (a destroy), "
                       "`backup_id` (a backup; a restore's backup restored), "
                       "`safety_backup_id` and `neutralize` (a restore: whether it neutralises "
                       "the restored database), `checks` (a deploy: each post-deploy check's "
                       "`name`, `status` passed, failed or skipped, and `detail`)"})
    created_at = UTCDateTime(required=True)
    started_at = UTCDateTime(allow_none=True, required=True)
    completed_at = UTCDateTime(allow_none=True, required=True)
    error_message = ma.fields.String(allow_none=True, required=True)
    triggered_by = ma.fields.UUID(attribute="triggered_by_id", allow_none=True, required=True,
                                  metadata={"description": "The user; null for Git pushes"})
    image_tag = ma.fields.String(allow_none=True, required=True)
    can_rollback = ma.fields.Function(svc.rollbackable, required=True, metadata={
        "description": "True when a rollback to this deployment would be accepted"})


class MessageSchema(Schema):
    message = ma.fields.String(required=True)


class DeployBody(ma.Schema):
    force = Boolean(load_default=False)
    git_branch = Branch(load_default=None)


class DeployResultSchema(Schema):
    message = ma.fields.String(required=True)
    skipped = ma.fields.Boolean(required=True, metadata={
        "description": "True (status 200) when the environment was already running"})
    deployment = ma.fields.Nested(DeploymentSchema, allow_none=True, required=True, metadata={
        "description": "The new deployment, or when skipped the latest one"})


class DestroyArgs(ma.Schema):
    delete_data = QueryBoolean(load_default=False)


class DestroyResultSchema(Schema):
    message = ma.fields.String(required=True)
    environment_id = ma.fields.UUID(required=True)
    deployment_id = ma.fields.UUID(required=True, metadata={
        "description": "The destroy's record (trigger and status `destroyed`)"})
    deleted_containers = ma.fields.Integer(required=True)
    deleted_database = ma.fields.Boolean(required=True)
    deleted_data = ma.fields.Boolean(required=True)


class CreateDeploymentBody(ma.Schema):
    project_id = ma.fields.UUID(required=True)
    environment_id = ma.fields.UUID(required=True)
    git_branch = Branch(load_default=None)


class ListArgs(CursorArgs):
    project_id = ma.fields.UUID(load_default=None)
    status = ma.fields.String(load_default=None, validate=ma.validate.OneOf(svc.STATUSES))


DeploymentPage = cursor_page_schema(DeploymentSchema, "DeploymentPage")


MODULE_NAME = r"^[A-Za-z0-9_]{1,128}$"  # as Odoo's -i takes them: comma-separated
MAX_INSTALL_MODULES = 100
CHECK_MODES = ("enforce", "warn")


AUTO_REVERT = ("When a deploy's module update fails (or the ERP after it, or a post-deploy "
               "check), the previous code comes back by itself, and the pre-deploy backup "
               "when a module update ran (true, the default); false leaves the environment "
               "as the deploy left it, `failed`, the task log naming the pre-deploy backup")
POST_DEPLOY_CHECKS = ("What a failing post-deploy check (the websocket through the proxy "
                      "with workers, the cron runner, modules left to upgrade, attachments' "
                      "files) does: `enforce` (the default) fails the deploy and reverts as "
                      "a failed module update does; `warn` logs it and the deploy stands")
INSTALL_MODULES = ("ERP modules (technical names) each deploy installs (`-i`) when the "
                   "database lacks them, from the add-ons or the ERP image's own; at most "
                   f"{MAX_INSTALL_MODULES}, [] for none. Installed modules stay installed "
                   "when a name is taken out")


class EnvironmentSettingsBody(ma.Schema):
    auto_deploy = Boolean()
    git_branch = Branch()
    auto_revert = Boolean(metadata={"description": AUTO_REVERT})
    post_deploy_checks = ma.fields.String(
        validate=ma.validate.OneOf(CHECK_MODES, error="One of: enforce, warn."),
        metadata={"description": POST_DEPLOY_CHECKS})
    install_modules = ma.fields.List(
        ma.fields.String(validate=ma.validate.Regexp(MODULE_NAME, error=(
            "A module's technical name: letters, digits and underscores, at most 128."))),
        validate=ma.validate.Length(max=MAX_INSTALL_MODULES),
        metadata={"description": INSTALL_MODULES})


class OpsEnvironmentSchema(Schema):
    id = ma.fields.UUID(required=True)
    project_id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    status = EnvironmentStatus(required=True, metadata={
        "description": "As the public API shows it: a destroyed environment is `pending`"})
    git_branch = ma.fields.String(attribute="branch", allow_none=True, required=True)
    auto_deploy = ma.fields.Boolean(required=True)
    auto_revert = ma.fields.Function(lambda env: env.auto_revert is not False, required=True,
                                     metadata={"type": "boolean", "description": AUTO_REVERT})
    post_deploy_checks = ma.fields.Function(
        lambda env: env.post_deploy_checks or "enforce", required=True,
        metadata={"type": "string", "enum": list(CHECK_MODES),
                  "description": POST_DEPLOY_CHECKS})
    install_modules = ma.fields.Function(lambda env: env.install_modules or [], required=True,
                                         metadata={"type": "array", "items": {"type": "string"},
                                                   "description": INSTALL_MODULES})
    is_active = ma.fields.Boolean(required=True, metadata={
        "description": "False once destroyed (until deployed again)"})
    server_id = ma.fields.UUID(allow_none=True, required=True)
    created_at = UTCDateTime(required=True)
    updated_at = UTCDateTime(allow_none=True, required=True)
    neutralized = Neutralized()
    anonymized = Anonymized()


@blp.route("/deployments/<uuid:deployment_id>/retry")
class Retry(MethodView):
    @errors(400, 403, 409, 429)
    @blp.response(201, DeploymentSchema)
    def post(self, deployment_id):
        """Retry a failed deployment

        A new `pending` record with the same branch, commit, image and configuration,
        the next version and `extra_data.retry_of` (permission
        `project.environments.deploy`)."""
        return svc.retry(current_actor(), deployment_id, current_berth())


@blp.route("/deployments/<uuid:deployment_id>/cancel")
class Cancel(MethodView):
    @errors(400, 403)
    @blp.response(200, MessageSchema)
    def post(self, deployment_id):
        """Cancel a pending or running deployment

        Permission `project.deployments.cancel`. Running steps are not killed and
        partial changes stay; the environment returns to its last stable state."""
        return svc.cancel(current_actor(), deployment_id)


@blp.route("/deployments/<uuid:deployment_id>/rollback")
class Rollback(MethodView):
    @errors(400, 403, 409, 429)
    @blp.response(201, DeploymentSchema)
    def post(self, deployment_id):
        """Roll back to this deployment

        The target must be `success` with `can_rollback`. A new `pending` record,
        trigger `rollback`, `rollback_from_id` the target, with the target's commit,
        image and configuration (permission `project.environments.deploy`)."""
        return svc.rollback(current_actor(), deployment_id, current_berth())


@blp.route("/environments/<uuid:environment_id>/deploy")
class Deploy(MethodView):
    @errors(400, 403, 409, 429)
    @blp.arguments(DeployBody, required=False)
    @blp.alt_response(200, schema=DeployResultSchema, success=True,
                      description="Skipped: the environment is already running")
    @blp.response(201, DeployResultSchema, description="A deployment was created")
    def post(self, body, environment_id):
        """Deploy or redeploy an environment

        Permission `project.environments.deploy`. Without `force`, a running
        environment whose branch does not change is skipped (200); with `force`, a
        new `redeploy` replaces the ERP container and keeps the database and
        filestore (201). A given `git_branch` becomes the environment's branch."""
        d, skipped = svc.deploy_environment(current_actor(), environment_id, berth=current_berth(),
                                            **body)
        if skipped:
            return {"message": "The environment is already running; nothing was deployed "
                               "(send force: true to redeploy).",
                    "skipped": True, "deployment": d}, 200
        return {"message": f"Deployment version {d.version} queued.", "skipped": False,
                "deployment": d}


@blp.route("/deployments/environment/<uuid:environment_id>/destroy")
class Destroy(MethodView):
    @errors(403, 409, 429, 502, 504)
    @blp.arguments(DestroyArgs, location="query")
    @blp.response(200, DestroyResultSchema)
    def delete(self, args, environment_id):
        """Destroy an environment's containers

        Removes the ERP and database containers, the database volume, the network
        and the configuration; with `delete_data=true` also the environment
        directory. Waits for the server (permission `project.environments.deploy`)."""
        return svc.destroy(current_actor(), environment_id, berth=current_berth(), **args)


@blp.route("/deployments")
class Deployments(MethodView):
    @errors()
    @blp.arguments(ListArgs, location="query")
    @blp.response(200, DeploymentPage)
    def get(self, args):
        """List deployments

        The user's organization's deployments, newest first (cursor page), filtered
        by `project_id` and `status`."""
        rows, meta = svc.list_deployments(current_actor(), **args)
        return {"data": rows, "pagination": meta}

    @errors(403, 409, 429)
    @blp.arguments(CreateDeploymentBody)
    @blp.response(201, DeploymentSchema)
    def post(self, body):
        """Create a manual deployment

        Trigger `manual`, for an environment of the project (permission
        `project.environments.deploy`). A given `git_branch` becomes the
        environment's branch."""
        return svc.create_deployment(current_actor(), berth=current_berth(), **body)


@blp.route("/deployments/<uuid:deployment_id>")
class DeploymentById(MethodView):
    @errors()
    @blp.response(200, DeploymentSchema)
    def get(self, deployment_id):
        """Get a deployment"""
        return svc.get_deployment(current_actor(), deployment_id)


@blp.route("/projects/<uuid:project_id>/environments/<uuid:env_id>")
class EnvironmentSettings(MethodView):
    @errors(403)
    @blp.arguments(EnvironmentSettingsBody, required=False)  # no body: nothing changes
    @blp.response(200, OpsEnvironmentSchema)
    def patch(self, body, project_id, env_id):
        """Change an environment's deployment settings

        `auto_deploy`, `git_branch` (used from the next deployment on),
        `auto_revert` (whether a failed deploy reverts), `post_deploy_checks`
        (`enforce` or `warn`) and `install_modules` (what each deploy installs
        when missing); omitted
        fields stay (permission `project.environments.deploy`)."""
        return svc.update_environment(current_actor(), project_id, env_id, body)
