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

from control_plane import events
from control_plane.infra import clock
from control_plane.infra.db import after_commit, database
from control_plane.models import Deployment, Environment, Project, TaskLogLine
from control_plane.services import audit
from control_plane.services.tasks import kinds, queue
from control_plane.vocabulary import lifecycle, states
from protocol.kinds import Phase

# Task-log lines the control plane writes are numbered from here, after any line
# of the agent's, so neither ever replaces the other.
CONTROL_PLANE_SEQ = 1_000_000_000
E, D = states.EnvironmentStatus, states.DeploymentStatus
ACTIVE = states.DEPLOYMENT_IN_PROGRESS


# --- the environment ------------------------------------------------------------

def move_environment(env, target, org_id):
    """The environment's status, checked against its table of moves, with its event."""
    if env.status == target:
        return
    lifecycle.check_move(env.status, target)
    previous, env.status, env.updated_at = env.status, target, clock.now()
    Environment.update(status=target, updated_at=env.updated_at).where(
        Environment.id == env.id).execute()
    events.record_status_changed(env, org_id, previous, target)


def has_containers(env):
    """The environment was provisioned and not removed since."""
    return bool(env.db_container or env.erp_container)


def check_allowed(env, kind):
    """409 when the lifecycle refuses the kind from the environment's status now;
    changes nothing (a caller checks before it takes a rate-limit slot, then
    starts the task)."""
    lifecycle.check(kind, env.status, has_containers=has_containers(env))


def begin(env, kind, *, created=False):
    """The environment's move for a new task (409 when the lifecycle refuses). A
    new environment is created `deploying` with its first deployment: no move. A
    destroyed environment that is deployed again becomes active again."""
    rule, org_id = lifecycle.rule(kind), env.project.organization_id
    if created:
        return
    check_allowed(env, kind)
    if rule.during:
        move_environment(env, rule.during, org_id)
    if not env.is_active and not rule.removes:  # it comes back: receivers see it created again
        env.is_active = True
        Environment.update(is_active=True).where(Environment.id == env.id).execute()
        events.record_created(env, org_id)


def in_progress(env_id):
    return Deployment.select().where(Deployment.environment == env_id,
                                     Deployment.status.in_(ACTIVE)).exists()


# --- starting -------------------------------------------------------------------

def wake(berth, server_id):
    """Tell the gateway a command is queued for the server, once it is committed."""
    if server_id is not None:
        after_commit(lambda: berth.gateway.wake(server_id))


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


def start(env, kind, *, berth, trigger=states.Trigger.MANUAL, actor=None,
          record=None, created=False, **params):
    """Every task starts here, inside the caller's transaction (the environment
    locked by the caller): the environment's move (409 when its table refuses),
    the task `pending`, its command with the kind's payload, and the gateway
    woken once the transaction commits. A removal of an environment that was
    never placed on a server has nothing to remove: it ends at once, without a
    command.

    `record`: fields of the task's row the caller decides (a retry or rollback
    passes the branch, commit, image and configuration it repeats); the kind's
    defaults fill the rest. `params` go to the kind's payload hook. `created`: the
    first deployment of an environment created `deploying` (it was `pending`)."""
    k = kinds.get(kind)
    before = E.PENDING if created else env.status
    begin(env, kind, created=created)
    record = dict(record or {}, environment_status_before=before)
    record["git_branch"] = record.get("git_branch") or env.branch
    record.update(k.defaults(env, berth.settings, record))
    task = new_record(env, kind, trigger=trigger,
                      triggered_by=actor.user_id if actor else None, **record)
    if audit.active():  # a task someone asked for (not the scheduler's, nor a rule's)
        audit.record(env.project.organization_id, f"environment.{kind}", "environment", env.id,
                     {"task_id": task.id, "trigger": trigger,
                      **{k: record[k] for k in ("git_branch", "extra_data") if record.get(k)}})
    if env.server_id is None and lifecycle.rule(kind).removes:
        settle(task, Outcome(k.succeeded, result={}))
        return Deployment.get_by_id(task.id)
    payload = k.payload(task, env, berth.settings, **params)
    limit = int(k.time_limit(payload).total_seconds() // 60)
    if limit != task.time_limit_minutes:
        task.time_limit_minutes = limit
        Deployment.update(time_limit_minutes=limit).where(Deployment.id == task.id).execute()
    queue.enqueue(env.server_id, k.command, payload, deployment_id=task.id)
    wake(berth, env.server_id)
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


def record_phase(server_id, command_id, phase):
    """The gateway's call when an agent reports that a command entered a phase: a
    deploy's `deploy` (its pre-deploy backup is done) starts the deploy's own time
    limit, kinds.TIME_LIMIT, from now. Any other phase, or a task that is over,
    changes nothing."""
    if phase != Phase.DEPLOY:
        return
    with database.atomic():
        deployment_id = queue.deployment_of(server_id, command_id)
        now, minutes = clock.now(), int(kinds.TIME_LIMIT.total_seconds() // 60)
        if deployment_id and (Deployment.update(phase_started_at=now, time_limit_minutes=minutes)
                              .where(Deployment.id == deployment_id, Deployment.status.in_(ACTIVE),
                                     Deployment.phase_started_at.is_null()).execute()):
            log_line(deployment_id, "info", f"the pre-deploy backup is done: the deployment "
                                            f"has {minutes} minutes from now")


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

    @property
    def ending(self):
        """How it ended, in the lifecycle's words (lifecycle.ENDINGS)."""
        if self.ok:
            return lifecycle.SUCCESS
        if self.status == D.CANCELLED:
            return lifecycle.CANCELLED
        if self.result is None:
            return lifecycle.TIMED_OUT
        return lifecycle.UNTOUCHED if self.result.get("untouched") else lifecycle.TOUCHED


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
        fields.update(kind.result_fields(d, outcome.result))
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
    rule = lifecycle.rule(d.kind)
    if outcome.ok and kind.on_success:
        kind.on_success(env, outcome.result, org_id, now)
    # Unless it succeeded, only a task that left the environment where it put it moves it.
    if outcome.ok or rule.during is None or env.status == rule.during:
        _move_to(env, rule.after(_before(d), outcome.ending), org_id)
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


def _before(d):
    """The status the task found its environment in; for a task recorded before
    that was kept, what the newest settled deployment left."""
    if d.environment_status_before:
        return d.environment_status_before
    last = (Deployment.select().where(Deployment.environment == d.environment_id,
                                      Deployment.id != d.id, deployments(),
                                      Deployment.status.in_((D.SUCCESS, D.FAILED, D.DESTROYED)))
            .order_by(Deployment.version.desc()).first())
    if last is None:
        return E.PENDING
    if last.status != D.SUCCESS:
        return E.DESTROYED if last.status == D.DESTROYED else E.FAILED
    return lifecycle.rule(last.kind).done or E.RUNNING


def _move_to(env, status, org_id):
    """The environment's move at a task's end (None: none). One deployed again
    after a destroy that goes back to `destroyed` (a cancel, a failure that
    changed nothing) leaves the lists once more."""
    if status is None:
        return
    move_environment(env, status, org_id)
    if status == E.DESTROYED and env.is_active:
        env.is_active = False
        Environment.update(is_active=False).where(Environment.id == env.id).execute()
        events.record_deleted(env.id, env.project_id, org_id)
