"""Environments: /projects/{id}/environments, /environments/{id}[/status|/logs],
and the task poll endpoint /deployments/{task_id}."""

import marshmallow as ma
from flask import current_app, request
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import (
    Anonymized,
    Branch,
    EnvironmentStatus,
    Name,
    Neutralized,
    Schema,
    UTCDateTime,
)
from control_plane.api.idempotency import idempotent
from control_plane.api.smorest import (
    CREATED_REPLAY_SCHEMA,
    REPLAY_DESCRIPTION,
    Blueprint,
    confirm_delete_header,
)
from control_plane.services.deploys import environments as svc
from control_plane.vocabulary import states
from control_plane.vocabulary.states import TaskStatus
from protocol.states import CertificateState

blp = Blueprint("environments", __name__, description="Environments")


def _domain():
    return current_app.config["APPS_DOMAIN"]


class EnvironmentSchema(Schema):
    id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    status = EnvironmentStatus(required=True)
    url = ma.fields.Function(lambda env: svc.url_of(env, _domain()), allow_none=True)
    erp_version = ma.fields.Function(lambda env: env.project.erp_version, allow_none=True)
    branch = ma.fields.String(allow_none=True)
    last_commit = ma.fields.Constant(None, allow_none=True,
                                     metadata={"description": "Always null."})
    cpu_cores = ma.fields.Float(allow_none=True)
    ram_mb = ma.fields.Integer(allow_none=True)
    disk_gb = ma.fields.Integer(allow_none=True)
    project_id = ma.fields.UUID(required=True)
    server_id = ma.fields.UUID(allow_none=True)
    created_at = UTCDateTime(required=True)
    updated_at = UTCDateTime(allow_none=True)
    neutralized = Neutralized()
    anonymized = Anonymized()


class EnvironmentCreateSchema(ma.Schema):
    name = Name(required=True)
    branch = Branch()
    environment_type = ma.fields.String(
        load_default="development",
        validate=ma.validate.OneOf(["development", "staging", "production"]))
    # Optional allocation, enforced as container limits; at most the server's totals.
    cpu_cores = ma.fields.Float(validate=ma.validate.Range(0.1, 1024), metadata={
        "description": "CPU cores for the ERP container (1.0 = one core). Default: no limit."})
    ram_mb = ma.fields.Integer(validate=ma.validate.Range(256, 4_194_304), metadata={
        "description": "Memory limit of the ERP container, MB. Default: no limit."})
    disk_gb = ma.fields.Integer(validate=ma.validate.Range(1, 1_000_000), metadata={
        "description": "Disk allocated (recorded for metrics; not enforced)."})


class EnvironmentUpdateSchema(ma.Schema):
    name = Name()
    branch = Branch(metadata={"description": "Used from the next deployment on."})


class ListArgs(ma.Schema):
    status = ma.fields.String(load_default=None, validate=ma.validate.Length(max=32))


class LastDeploySchema(Schema):
    id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": [s.value for s in states.SNAPSHOT_TASK_STATUSES],
        "description": "`pending` while the server's agent is not connected (nothing was "
                       "dispatched), `queued` until the agent starts it; a cancelled task "
                       "is `failed` here (`outcome` says `cancelled`)"})
    outcome = ma.fields.String(required=True, allow_none=True, metadata={
        "enum": [TaskStatus.COMPLETED.value, TaskStatus.FAILED.value,
                 TaskStatus.CANCELLED.value, None],
        "description": "How the task ended, as its poll URL shows it; null while it is not "
                       "over"})
    started_at = UTCDateTime(allow_none=True)
    completed_at = UTCDateTime(allow_none=True)


class ProxySchema(Schema):
    running = ma.fields.Boolean(required=True)
    reason = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "Why it is not running"})
    reported_at = ma.fields.String(required=True, metadata={
        "description": "When the server's agent reported it (ISO 8601)"})


class CertificateSchema(Schema):
    hostname = ma.fields.String(required=True)
    state = ma.fields.String(required=True, metadata={
        "enum": [s.value for s in CertificateState]})
    valid_until = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "The certificate's expiry (ISO 8601), when there is one"})
    reason = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "What the last attempt to obtain it ran into (`failing`)"})


class StatusSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    status = EnvironmentStatus(required=True)
    url = ma.fields.String(allow_none=True)
    container_running = ma.fields.Boolean(required=True, metadata={
        "description": "True when status is running or paused"})
    db_ready = ma.fields.Boolean(required=True, metadata={
        "description": "Best effort: true when status is running"})
    http_ok = ma.fields.Boolean(required=True, metadata={
        "description": "Best effort: true when status is running"})
    neutralized = Neutralized()
    anonymized = Anonymized()
    last_deploy = ma.fields.Nested(LastDeploySchema, allow_none=True, required=True)
    proxy = ma.fields.Nested(ProxySchema, allow_none=True, required=True, metadata={
        "description": "The server's HTTPS proxy as its agent last reported it; null before "
                       "any report"})
    certificates = ma.fields.List(ma.fields.Nested(CertificateSchema), required=True, metadata={
        "description": "One per name the environment answers at (its platform subdomain, "
                       "then its verified custom domains); empty before any report"})


class LogArgs(ma.Schema):
    task_id = ma.fields.UUID(load_default=None)
    lines = ma.fields.Integer(load_default=200, validate=ma.validate.Range(1, 5000))


class TaskLogSchema(Schema):
    task_id = ma.fields.String(allow_none=True, required=True)
    log = ma.fields.String(required=True)
    lines = ma.fields.Integer(required=True)
    truncated = ma.fields.Boolean(required=True)


TASK_STATUSES = [s.value for s in TaskStatus]


class TaskAcceptedSchema(Schema):
    task_id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": TASK_STATUSES,
        "description": "`queued`; `pending` when the server's agent is not connected; "
                       "`completed` for the deletion of an environment never placed on a "
                       "server (nothing to remove)"})
    environment_id = ma.fields.UUID(required=True)
    poll_url = ma.fields.String(required=True)


class TaskSchema(Schema):
    task_id = ma.fields.UUID(attribute="id", required=True)
    status = ma.fields.String(attribute="task_status", required=True, metadata={
        "enum": TASK_STATUSES,
        "description": "`pending` while the server's agent is not connected, `queued` until "
                       "the agent starts it, then `running`; ends `completed`, `failed` or "
                       "`cancelled`"})
    kind = ma.fields.String(required=True)
    trigger = ma.fields.String(required=True)
    version = ma.fields.Integer(required=True, allow_none=True, metadata={
        "description": "The deployment's number in its environment; null for backups, "
                       "restores and exports, which are not deployments"})
    environment_id = ma.fields.UUID(required=True)
    project_id = ma.fields.UUID(required=True)
    git_branch = ma.fields.String(allow_none=True)
    git_commit = ma.fields.String(allow_none=True)
    error_message = ma.fields.String(allow_none=True)
    created_at = UTCDateTime(required=True)
    started_at = UTCDateTime(allow_none=True)
    completed_at = UTCDateTime(allow_none=True)


@blp.route("/projects/<uuid:project_id>/environments")
class Environments(MethodView):
    @blp.arguments(ListArgs, location="query")
    @blp.response(200, EnvironmentSchema(many=True))
    def get(self, args, project_id):
        """A project's active environments, oldest first (not paginated)."""
        envs, project = svc.environments_of(current_actor(), project_id, args["status"])
        for env in envs:
            env.project = project
        return envs

    @idempotent
    @blp.arguments(EnvironmentCreateSchema)
    @blp.alt_response(202, schema=TaskAcceptedSchema, description=REPLAY_DESCRIPTION)
    @blp.response(201, EnvironmentSchema)
    def post(self, body, project_id):
        """Create an environment (status `deploying`); its first deployment is queued."""
        return svc.create_environment(current_actor(), project_id,
                                      berth=current_berth(), **body)


@blp.route("/environments/<uuid:env_id>")
class EnvironmentById(MethodView):
    @blp.response(200, EnvironmentSchema)
    def get(self, env_id):
        return svc.get_environment(current_actor(), env_id)

    @blp.arguments(EnvironmentUpdateSchema, required=False)  # no body: nothing changes
    @blp.response(200, EnvironmentSchema)
    def patch(self, body, env_id):
        """Rename an environment or change its branch (full-access key); omitted
        fields stay. A new branch applies on the next deploy: nothing redeploys now."""
        return svc.update_environment(current_actor(), env_id, body)

    @blp.doc(**confirm_delete_header("delete the environment"))
    @blp.response(202, TaskAcceptedSchema)
    def delete(self, env_id):
        """Delete an environment (`X-Confirm-Delete: true`): a task that removes its
        containers, database and filestore."""
        return svc.delete_environment(current_actor(), env_id,
                                      request.headers.get("X-Confirm-Delete"),
                                      berth=current_berth())


@blp.route("/environments/<uuid:env_id>/actions/<any(deploy,redeploy,restart,start,stop):action>")
class EnvironmentAction(MethodView):
    @idempotent
    @blp.alt_response(201, schema=CREATED_REPLAY_SCHEMA, description=REPLAY_DESCRIPTION)
    @blp.response(202, TaskAcceptedSchema)
    def post(self, env_id, action):
        """Run an action as a task (full-access key; accepts `X-Idempotency-Key`)."""
        return svc.act(current_actor(), env_id, action, berth=current_berth())


@blp.route("/environments/<uuid:env_id>/status")
class EnvironmentStatusView(MethodView):
    @blp.response(200, StatusSchema)
    def get(self, env_id):
        return svc.status_snapshot(current_actor(), env_id, _domain())


@blp.route("/environments/<uuid:env_id>/logs")
class EnvironmentLogs(MethodView):
    @blp.arguments(LogArgs, location="query")
    @blp.response(200, TaskLogSchema)
    def get(self, args, env_id):
        """The task log: the most recent task's by default, newest lines kept;
        `task_id` null when the environment has no such task (or none at all)."""
        return svc.task_log(current_actor(), env_id, args["task_id"], args["lines"])


@blp.route("/deployments/<uuid:task_id>")
class Task(MethodView):
    @blp.response(200, TaskSchema)
    def get(self, task_id):
        """A task (deployment) by id: what `poll_url` points at."""
        return svc.get_task(current_actor(), task_id)
