"""A task's life (a deployment record is a task): the kinds, `start`, what the
agent's acknowledgement and result do (`record_ack`, `record_result`) and the one
`settle` every ending goes through (the agent's result, a cancel, the reaper).

To change what happens when a task ends, start here: `settle` makes the
conditional status update, withdraws the commands of a task that ended without
its agent, writes the task-log line, moves the environment (the only writer of
its status: `move_environment`) and records the events; a kind's own effects
are its hooks in `KINDS`."""

from collections.abc import Callable
from dataclasses import dataclass, field

from peewee import fn

from control_plane import clock, events, states
from control_plane.db import after_commit, database
from control_plane.models import Deployment, Environment, Project, TaskLogLine
from control_plane.services.deploys import backup_tasks, configuration, export_tasks, queue, routes
from control_plane.services.projects import addon_repositories

# Task-log lines the control plane writes are numbered from here, after any line
# of the agent's, so neither ever replaces the other.
CONTROL_PLANE_SEQ = 1_000_000_000
E, D = states.EnvironmentStatus, states.DeploymentStatus
ACTIVE = states.DEPLOYMENT_IN_PROGRESS


# --- the kinds and their hooks --------------------------------------------------

def with_addon_commits(config, commits):
    """The deployment's add-on repositories pinned at the commits the agent
    deployed, so that a rollback to it checks out the same code."""
    repos = (config or {}).get("addon_repositories") or []
    if not commits or len(commits) != len(repos):
        return config
    return {**config, "addon_repositories": [{**repo, "commit": sha}
                                             for repo, sha in zip(repos, commits, strict=True)]}


def _code_fields(d, result):
    """What a successful task keeps of the agent's result: the commits it ran."""
    return {"git_commit": result.get("git_commit") or d.git_commit,
            "config": with_addon_commits(d.config, result.get("addon_commits"))}


def _destroy_fields(d, result):
    return {"extra_data": {**(d.extra_data or {}),
                           "deleted_containers": int(result.get("deleted_containers") or 0),
                           "deleted_database": bool(result.get("deleted_database")),
                           "deleted_data": bool(result.get("deleted_data"))}}


def _containers(env, result, org_id, now):
    Environment.update(erp_container=result.get("erp_container"),
                       db_container=result.get("db_container")).where(
        Environment.id == env.id).execute()


def _removed(env, result, org_id, now):
    """Deleted (public API) or destroyed (/api/v1): gone from the API, no containers."""
    env.is_active = False
    Environment.update(is_active=False, erp_container=None, db_container=None,
                       updated_at=now).where(Environment.id == env.id).execute()
    events.record_deleted(env.id, env.project_id, org_id)


def _no_fields(d, result):
    return {}


@dataclass(frozen=True)
class Kind:
    command: str  # the agent's command
    while_running: str | None  # the environment's status while it runs (None: unchanged)
    when_done: str | None  # the environment's status once it succeeded (None: unchanged)
    succeeded: str = D.SUCCESS  # the task's status once it succeeded
    task_fields: Callable = _code_fields  # (task, result) -> task fields on success
    on_success: Callable | None = None  # (env, result, org_id, now): the environment's effects
    failure: str = "the deployment failed"  # the error message when the agent gave none
    # A task of another resource (backups): its rows and events instead of the
    # `deploy.*` ones, a longer time limit; not a deployment (no last_deploy,
    # retry or rollback).
    rows: object = None  # module with started, settled and refused (backup_tasks)

    @property
    def removes(self):
        return self.on_success is _removed

    @property
    def failed(self):
        """A failed deploy or deletion leaves the environment `failed`; a failed
        start, stop or restart is a runtime error on a deployed environment; a
        failed backup or restore leaves it as it is."""
        if self.when_done is None:
            return None
        return E.FAILED if self.while_running else E.ERROR


KINDS = {
    "deploy": Kind("deploy", E.DEPLOYING, E.RUNNING, on_success=_containers),
    "redeploy": Kind("deploy", E.DEPLOYING, E.RUNNING, on_success=_containers),
    "restart": Kind("restart", None, E.RUNNING),
    "start": Kind("start", None, E.RUNNING),
    "stop": Kind("stop", None, E.STOPPED),
    "delete": Kind("destroy", E.DESTROYING, E.DELETED, on_success=_removed),
    # the /api/v1 destroy: the environment stays known (inactive, `destroyed`) and
    # may be deployed again
    "destroy": Kind("destroy", E.DESTROYING, E.DESTROYED, succeeded=D.DESTROYED,
                    task_fields=_destroy_fields, on_success=_removed,
                    failure="the destroy failed"),
    # backups and restores (services/backups): the environment stays `running`
    "backup": Kind("backup", None, None, task_fields=_no_fields, failure="the backup failed",
                   rows=backup_tasks),
    "restore": Kind("restore", None, None, task_fields=_no_fields,
                    failure="the restore failed", rows=backup_tasks),
    # a completed backup written as Odoo's backup zip (services/backups/odoo.py)
    "export": Kind("export", None, None, task_fields=_no_fields, failure="the export failed",
                   rows=export_tasks),
}
# The kinds that are not deployments: no last_deploy, retry, rollback or stable state.
NOT_DEPLOYMENTS = tuple(name for name, k in KINDS.items() if k.rows)


# --- the environment ------------------------------------------------------------

def move_environment(env, target, org_id):
    """The environment's status, checked against its table, with its event."""
    if env.status == target:
        return
    states.check("environment", env.status, target)
    previous, env.status, env.updated_at = env.status, target, clock.now()
    Environment.update(status=target, updated_at=env.updated_at).where(
        Environment.id == env.id).execute()
    events.record_status_changed(env, org_id, previous, target)


def begin(env, kind, org_id):
    """The environment's move for a new task (409 when its table refuses). A
    destroyed environment that is deployed again becomes active again."""
    k = KINDS[kind]
    if k.while_running:
        move_environment(env, k.while_running, org_id)
    elif env.status != k.when_done:
        states.check("environment", env.status, k.when_done)  # e.g. stop only what runs
    if not env.is_active and not k.removes:  # it comes back: receivers see it created again
        env.is_active = True
        Environment.update(is_active=True).where(Environment.id == env.id).execute()
        events.record_created(env, org_id)


def in_progress(env_id):
    return Deployment.select().where(Deployment.environment == env_id,
                                     Deployment.status.in_(ACTIVE)).exists()


# --- starting -------------------------------------------------------------------

def wake(gateway, server_id):
    """Tell the gateway a command is queued for the server, once it is committed."""
    if gateway is not None and server_id is not None:
        after_commit(lambda: gateway.wake(server_id))


def new_record(env, project_id, **fields):
    """Inside the caller's transaction: the task's record, `pending`, next version."""
    version = (Deployment.select(fn.MAX(Deployment.version))
               .where(Deployment.environment == env.id).scalar() or 0) + 1
    return Deployment.create(environment=env, project=project_id, version=version,
                             status=states.check("deployment", None, D.PENDING), **fields)


def start(env, project, settings, *, trigger, kind="deploy", triggered_by=None, commit=None,
          branch=None, image=None, config=None, rollback_from=None, extra_data=None,
          delete_data=False, gateway=None):
    """Inside the caller's transaction: the deployment record and its command; the
    gateway is woken once it commits. Branch, image and configuration default to
    the environment's current ones; a retry or a rollback passes those of the
    deployment it repeats."""
    image = image or settings["ERP_IMAGE"].format(erp_version=project.erp_version or "17.0")
    branch = branch or env.branch
    if config is None:
        config = {"cpu_cores": env.cpu_cores, "ram_mb": env.ram_mb,
                  "addon_repositories": addon_repositories.for_deploy(project.id),
                  **configuration.snapshot(env)}
    deployment = new_record(
        env, project, kind=kind, trigger=trigger, git_branch=branch, git_commit=commit,
        image_tag=image, triggered_by=triggered_by, config=config,
        rollback_from=rollback_from, extra_data=extra_data or {})
    payload = {
        "environment_id": str(env.id), "deployment_id": str(deployment.id),
        "delete_data": kind == "delete" or bool(delete_data),
        "erp_image": image, "postgres_image": settings["POSTGRES_IMAGE"],
        "cpu_cores": config.get("cpu_cores"), "ram_mb": config.get("ram_mb"),
        "git": {"url": project.git_repo_url, "branch": branch, "commit": commit},
        "addon_repositories": config.get("addon_repositories") or [],
        **configuration.agent_fields(config),  # secret values sealed until delivery
        **routes.fields(env, settings),  # the proxy and the host names it routes here
    }
    if pre_backup := backup_tasks.pre_deploy(env, deployment, settings):
        payload["pre_backup"] = pre_backup  # the agent takes it first, or fails the deploy
    queue.enqueue(env.server_id, KINDS[kind].command, payload, deployment_id=deployment.id)
    wake(gateway, env.server_id)
    return deployment


# --- what the agent says --------------------------------------------------------

def record_ack(server_id, command_id):
    """The gateway's call when an agent acknowledges a command."""
    with database.atomic():
        deployment_id = queue.mark_acked(server_id, command_id)
        if deployment_id:
            on_ack(deployment_id)


def record_result(server_id, command_id, ok, result=None, error=None):
    """The gateway's call with an agent's result: the command's result and what it
    settles, in one transaction. If settling fails, the command stays unanswered
    and is asked for again on the next stream."""
    with database.atomic():
        deployment_id = queue.mark_completed(server_id, command_id, ok, result, error)
        if deployment_id:
            on_result(deployment_id, ok, result, error)


def on_ack(deployment_id):
    """The agent has the command: the task is running."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status != D.PENDING:
            return
        now = clock.now()
        claimed = (Deployment.update(status=states.check("deployment", d.status, D.RUNNING),
                                     started_at=now, updated_at=now)
                   .where(Deployment.id == d.id, Deployment.status == d.status).execute())
        if not claimed:
            return  # cancelled meanwhile
        org_id = Project.get_by_id(d.project_id).organization_id
        rows = KINDS[d.kind].rows
        if rows:
            rows.started(d, org_id, now)
        else:
            backup_tasks.started(d, org_id, now)  # a deploy's pre_deploy backup
            events.record_started(d, org_id)


def on_result(deployment_id, ok, result, error):
    """The agent finished: the task and its environment settle."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status in states.DEPLOYMENT_TERMINAL:
            return  # cancelled or reaped meanwhile: the late result changes nothing
        kind = KINDS[d.kind]
        if ok and kind.rows and (why := kind.rows.refused(d, result or {})):
            ok, error = False, why  # e.g. a backup the agent could not verify
        settle(d, Outcome(kind.succeeded if ok else D.FAILED, result=result or {}, error=error))


# --- settling -------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """How a task ends. `result` is the agent's (None when the task ended without
    it: cancelled or timed out); `withdraw` is then why its commands are withdrawn."""
    status: str  # success, destroyed, failed or cancelled
    result: dict | None = None
    error: str | None = None
    fields: dict = field(default_factory=dict)  # more task fields (who cancelled)
    log: tuple | None = None  # (level, message) for the task log
    withdraw: str | None = None
    cancelled_by: object = None  # the user's id, for the event

    @property
    def ok(self):
        return self.status in (D.SUCCESS, D.DESTROYED)


# The environment statuses a task puts (or leaves) it in: a timed-out task moves
# them to `error`. Tasks that do not move the environment (restart, start, stop)
# leave its status alone: nothing says what it is now.
TRANSIENT = (E.DEPLOYING, E.PENDING, E.DESTROYING)


def settle(d, outcome, *, only_if=None, now=None):
    """The one place a task ends: the task claimed by a conditional update (still in
    the status read; `only_if` adds a condition), then its commands, its log, its
    environment and its events. Returns the environment's status, or None when
    someone else settled the task first."""
    kind, now = KINDS[d.kind], now or clock.now()
    fields = {"status": states.check("deployment", d.status, outcome.status),
              "completed_at": now, "updated_at": now, **outcome.fields}
    if outcome.result is not None:  # the work was done: it started, at the latest now
        fields["started_at"] = d.started_at or now
    if outcome.ok:
        fields.update(kind.task_fields(d, outcome.result))
    elif outcome.status == D.FAILED:
        fields["error_message"] = (outcome.error or kind.failure)[:2000]
    claim = Deployment.update(**fields).where(Deployment.id == d.id, Deployment.status == d.status)
    if only_if is not None:
        claim = claim.where(only_if)
    if not claim.execute():
        return None
    if outcome.withdraw:
        queue.withdraw(d.id, outcome.withdraw)
    if outcome.log:
        log_line(d.id, *outcome.log)
    env = Environment.get_by_id(d.environment_id)
    org_id = Project.get_by_id(d.project_id).organization_id
    if outcome.status == D.CANCELLED:
        status = _restore(env, d, org_id)
        (kind.rows or backup_tasks).settled(d, outcome, org_id, now)
        if not kind.rows:
            events.record_cancelled(d, org_id, outcome.cancelled_by, status)
        return status
    if outcome.ok:
        if kind.on_success:
            kind.on_success(env, outcome.result, org_id, now)
        if kind.when_done:
            move_environment(env, kind.when_done, org_id)
    elif outcome.result is not None:  # the agent failed it
        if outcome.result.get("untouched"):  # before changing anything (a pre_deploy backup)
            _restore(env, d, org_id)
        elif kind.failed:
            move_environment(env, kind.failed, org_id)
    elif env.status in TRANSIENT:  # timed out
        move_environment(env, E.ERROR, org_id)
    (kind.rows or backup_tasks).settled(d, outcome, org_id, now)  # a deploy's pre_deploy
    if not kind.rows:
        events.record_finished(d, org_id, outcome.ok, now)
    return env.status


def log_line(deployment_id, level, message):
    """The control plane's line in a task's log, after every line already there."""
    seq = max(CONTROL_PLANE_SEQ - 1, TaskLogLine.select(fn.MAX(TaskLogLine.seq))
              .where(TaskLogLine.deployment == deployment_id).scalar() or 0) + 1
    TaskLogLine.create(deployment=deployment_id, seq=seq, level=level, message=message)


def last_stable_status(env_id, excluding):
    """What the newest settled deployment (success, failed or destroyed) left the
    environment as; `pending` when there is none (never provisioned)."""
    last = (Deployment.select().where(Deployment.environment == env_id, Deployment.id != excluding,
                                      Deployment.kind.not_in(NOT_DEPLOYMENTS),
                                      Deployment.status.in_((D.SUCCESS, D.FAILED, D.DESTROYED)))
            .order_by(Deployment.version.desc()).first())
    if last is None:
        return E.PENDING, False
    if last.status == D.DESTROYED:
        return E.DESTROYED, True
    if last.status == D.FAILED:
        return E.FAILED, False
    return KINDS[last.kind].when_done, False


def _restore(env, cancelled, org_id):
    """Only a task that moved the environment (to `deploying`) moves it back."""
    if env.status != KINDS[cancelled.kind].while_running:
        return env.status
    status, destroyed = last_stable_status(env.id, cancelled.id)
    move_environment(env, status, org_id)
    if destroyed:  # deployed again after a destroy, then cancelled: destroyed again
        Environment.update(is_active=False).where(Environment.id == env.id).execute()
        events.record_deleted(env.id, env.project_id, org_id)
    return status
