"""The task engine: the one way a task starts (`start`), what the agent's
acknowledgement and result do (`record_ack`, `record_result`), and the one
`settle` every ending goes through (the agent's result, a cancel, the reaper).

A task is a Deployment row of a registered kind (kinds.py). The engine does what
every task does: the record and its command, the wake-up, the environment's
moves (`move_environment` is the only writer of an environment's status), the
task log, settling once; the kind's hooks do what is its own (the payload, its
rows, its events). To change what happens when a task ends, start at `settle`."""

from dataclasses import dataclass, field

from peewee import fn

from control_plane import clock, events, states
from control_plane.db import after_commit, database
from control_plane.models import Deployment, Environment, Project, TaskLogLine
from control_plane.services import audit
from control_plane.services.tasks import kinds, queue

# Task-log lines the control plane writes are numbered from here, after any line
# of the agent's, so neither ever replaces the other.
CONTROL_PLANE_SEQ = 1_000_000_000
E, D = states.EnvironmentStatus, states.DeploymentStatus
ACTIVE = states.DEPLOYMENT_IN_PROGRESS


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


def check_allowed(env, kind):
    """409 when the environment's table refuses the kind's move; changes nothing
    (a caller checks before it takes a rate-limit slot, then starts the task). An
    environment already in the status the task puts it in (a new one, created
    `deploying` with its first deployment) is no move."""
    k = kinds.get(kind)
    if k.while_running:
        if env.status != k.while_running:
            states.check("environment", env.status, k.while_running)
    elif k.when_done and env.status != k.when_done:
        states.check("environment", env.status, k.when_done)  # e.g. stop only what runs


def begin(env, kind):
    """The environment's move for a new task (409 when its table refuses). A
    destroyed environment that is deployed again becomes active again."""
    k, org_id = kinds.get(kind), env.project.organization_id
    check_allowed(env, kind)
    if k.while_running:
        move_environment(env, k.while_running, org_id)
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


def new_record(env, kind, *, trigger, **fields):
    """Inside the caller's transaction: the task's row, `pending`. A deployment
    takes the environment's next version (a destroy with no server too, which
    never reaches an agent); backups, restores and exports are not deployments
    and take none (the spec's version "increments per new deployment")."""
    version = None
    if kinds.get(kind).is_deployment:  # NULLs (the other tasks) are not counted by MAX
        version = (Deployment.select(fn.MAX(Deployment.version))
                   .where(Deployment.environment == env.id).scalar() or 0) + 1
    return Deployment.create(environment=env, project=env.project_id, version=version,
                             kind=kind, trigger=trigger,
                             status=states.check("deployment", None, D.PENDING), **fields)


def start(env, kind, *, settings, gateway=None, trigger=states.Trigger.MANUAL, actor_id=None,
          record=None, **params):
    """Every task starts here, inside the caller's transaction (the environment
    locked by the caller): the environment's move (409 when its table refuses),
    the task `pending`, its command with the kind's payload, and the gateway
    woken once the transaction commits. A removal of an environment that was
    never placed on a server has nothing to remove: it ends at once, without a
    command.

    `record`: fields of the task's row the caller decides (a retry or rollback
    passes the branch, commit, image and configuration it repeats); the kind's
    defaults fill the rest. `params` go to the kind's payload hook."""
    k = kinds.get(kind)
    begin(env, kind)
    record = dict(record or {})
    record["git_branch"] = record.get("git_branch") or env.branch
    record.update(k.defaults(env, settings, record))
    task = new_record(env, kind, trigger=trigger, triggered_by=actor_id, **record)
    if audit.active():  # a task someone asked for (not the scheduler's, nor a rule's)
        audit.record(env.project.organization_id, f"environment.{kind}", "environment", env.id,
                     {"task_id": task.id, "trigger": trigger,
                      **{k: record[k] for k in ("git_branch", "extra_data") if record.get(k)}})
    if env.server_id is None and k.removes:
        settle(task, Outcome(k.succeeded, result={}))
        return Deployment.get_by_id(task.id)
    payload = k.payload(task, env, settings, **params)
    limit = int(k.time_limit(payload).total_seconds() // 60)
    if limit != task.time_limit_minutes:
        task.time_limit_minutes = limit
        Deployment.update(time_limit_minutes=limit).where(Deployment.id == task.id).execute()
    queue.enqueue(env.server_id, k.command, payload, deployment_id=task.id)
    wake(gateway, env.server_id)
    return task


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
        if claimed:  # else cancelled meanwhile
            kinds.get(d.kind).started(d, _org_of(d), now)


def on_result(deployment_id, ok, result, error):
    """The agent finished: the task and its environment settle."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status in states.DEPLOYMENT_TERMINAL:
            return  # cancelled or reaped meanwhile: the late result changes nothing
        kind = kinds.get(d.kind)
        if ok and (why := kind.refused(d, result or {})):
            ok, error = False, why  # e.g. a backup the agent could not verify
        settle(d, Outcome(kind.succeeded if ok else D.FAILED, result=result or {}, error=error))


def _org_of(d):
    return Project.select(Project.organization).where(Project.id == d.project_id).scalar()


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
    environment, and the kind's `settled` hook (its rows and events). Returns the
    environment's status, or None when someone else settled the task first."""
    kind, now = kinds.get(d.kind), now or clock.now()
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
    org_id = _org_of(d)
    if outcome.status == D.CANCELLED:
        _restore(env, d, org_id)
    elif outcome.ok:
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
    kind.settled(d, outcome, org_id, now, env.status)
    for watcher in kinds.watchers():
        watcher(d, outcome, org_id, now)
    return env.status


def log_line(deployment_id, level, message):
    """The control plane's line in a task's log, after every line already there."""
    seq = max(CONTROL_PLANE_SEQ - 1, TaskLogLine.select(fn.MAX(TaskLogLine.seq))
              .where(TaskLogLine.deployment == deployment_id).scalar() or 0) + 1
    TaskLogLine.create(deployment=deployment_id, seq=seq, level=level, message=message)


def deployments():
    """The tasks that are deployments (not backups, restores or exports)."""
    return Deployment.kind.not_in(kinds.names(is_deployment=False))


def last_stable_status(env_id, excluding):
    """What the newest settled deployment (success, failed or destroyed) left the
    environment as; `pending` when there is none (never provisioned)."""
    last = (Deployment.select().where(Deployment.environment == env_id, Deployment.id != excluding,
                                      deployments(),
                                      Deployment.status.in_((D.SUCCESS, D.FAILED, D.DESTROYED)))
            .order_by(Deployment.version.desc()).first())
    if last is None:
        return E.PENDING, False
    if last.status == D.DESTROYED:
        return E.DESTROYED, True
    if last.status == D.FAILED:
        return E.FAILED, False
    return kinds.get(last.kind).when_done, False


def _restore(env, task, org_id):
    """Only a task that moved the environment (to `deploying`) moves it back."""
    if env.status != kinds.get(task.kind).while_running:
        return
    status, destroyed = last_stable_status(env.id, task.id)
    move_environment(env, status, org_id)
    if destroyed:  # deployed again after a destroy, then cancelled: destroyed again
        Environment.update(is_active=False).where(Environment.id == env.id).execute()
        events.record_deleted(env.id, env.project_id, org_id)
