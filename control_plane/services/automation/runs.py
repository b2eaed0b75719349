"""A rule's runs, one per firing. `begin` records the run (`running`) and emits
`automation_rule.triggered`; `act` starts its action's task; the task's end
(`follow`, called by the task engine's watcher) ends the run and emits
`automation_rule.completed` or `.failed`: the action's outcome, not the moment
it was queued. An action that cannot start ends the run at once: `skipped` when
the environment is busy or not ready (a conflict), `failed` otherwise, with the
reason (and `automation_rule.failed`, whose `status` says which).

`copy_database` with `fresh` is two tasks: a backup of the source, then (once it
completed) the restore of that backup into the target; a `preview` has its
steps too (previews.py)."""

from control_plane import events
from control_plane.events import Name
from control_plane.infra import clock, nudge
from control_plane.infra.db import after_commit, database, for_update
from control_plane.infra.pagination import CursorList
from control_plane.models import AutomationRule, AutomationRun, Environment, Project
from control_plane.services import audit
from control_plane.services.accounts import actors
from control_plane.services.automation import builds, previews
from control_plane.services.automation import rules as rule_store
from control_plane.services.backups import backups
from control_plane.services.deploys import actions
from control_plane.services.tasks import engine
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import ApiError, AutomationRuleDisabled, NotFound
from control_plane.vocabulary.states import AutomationAction, AutomationTrigger
from protocol.kinds import TaskKind

RUNNING, COMPLETED, FAILED, SKIPPED = (states.RunStatus.RUNNING, states.RunStatus.COMPLETED,
                                       states.RunStatus.FAILED, states.RunStatus.SKIPPED)
SCHEDULER = "scheduler"  # the actor of schedule and event runs
# The task trigger (the spec's values) of an action, by what fired its rule.
TASK_TRIGGER = {AutomationTrigger.MANUAL: states.Trigger.MANUAL,
                AutomationTrigger.GIT_PUSH: states.Trigger.GIT_PUSH,
                AutomationTrigger.SCHEDULE: states.Trigger.SCHEDULED,
                AutomationTrigger.EVENT: states.Trigger.SCHEDULED}


def begin(rule, *, trigger_type, actor, branch=None, depth=0, stage=None, environment_id=None):
    """Inside the caller's transaction: the run, `running`, and its event."""
    target = environment_id or rule.action.get("environment_id")
    run = AutomationRun.create(rule=rule, trigger_type=trigger_type, branch=branch,
                               actor=str(actor)[:255], started_at=clock.now(),
                               status=states.check("automation_run", None, RUNNING),
                               environment_id=target, depth=depth, stage=stage)
    events.record_automation(rule, run, Name.AUTOMATION_RULE_TRIGGERED)
    return run


def skipped(rule, *, trigger_type, actor, reason, branch=None, depth=0):
    """A firing that does nothing (a chain cut, a limit): recorded, with its events."""
    run = begin(rule, trigger_type=trigger_type, actor=actor, branch=branch, depth=depth)
    finish(rule, run, SKIPPED, reason)
    return run


def finish(rule, run, status, reason=None):
    now = clock.now()
    done = AutomationRun.update(status=states.check("automation_run", RUNNING, status),
                                reason=reason and reason[:2000],
                                finished_at=now).where(AutomationRun.id == run.id,
                                                       AutomationRun.status == RUNNING).execute()
    if done:
        run.status, run.reason, run.finished_at = status, reason, now
        events.record_automation(rule, run, Name.AUTOMATION_RULE_COMPLETED if status == COMPLETED
                                 else Name.AUTOMATION_RULE_FAILED, reason)


def act(rule, run, *, berth, commit=None, base=None):
    """Inside the caller's transaction: the run's action (or its next stage)
    started, once (a conditional update claims it); a refusal ends the run."""
    claimed = AutomationRun.update(action_started=True).where(
        AutomationRun.id == run.id, AutomationRun.status == RUNNING,
        ~AutomationRun.action_started).execute()
    if not claimed:
        return run
    try:
        with database.atomic():  # a savepoint: a refused start leaves nothing behind
            task_id, stage = _start(rule, run, berth, commit, base)
    except ApiError as exc:
        finish(rule, run, SKIPPED if exc.status == 409 else FAILED, exc.message)
        return run
    if task_id is None:  # a build waiting for its server: the scheduler's job tries again
        AutomationRun.update(action_started=False).where(AutomationRun.id == run.id).execute()
        run.action_started = False
        return run
    AutomationRun.update(task=task_id, stage=stage, environment_id=run.environment_id).where(
        AutomationRun.id == run.id).execute()
    run.task, run.stage, run.action_started = task_id, stage, True
    return run


def _locked(env_id):
    env = for_update(Environment.select(Environment, Project).join(Project).where(
        Environment.id == env_id, Environment.is_active, Project.deleted_at.is_null()),
        of=Environment).first()
    if env is None:
        raise NotFound("The rule's environment no longer exists (or was destroyed).")
    return env


def _start(rule, run, berth, commit, base=None):
    """(task id, stage) of the action's next task."""
    action, trigger = rule.action, TASK_TRIGGER[run.trigger_type]
    does = action["type"]
    if does == AutomationAction.TEST:
        return builds.start(rule, run, berth=berth, trigger=trigger, end_run=finish,
                            commit=commit, base=base)
    if does == AutomationAction.PREVIEW:
        return previews.start(rule, run, berth=berth, trigger=trigger,
                              commit=commit)
    if does == AutomationAction.DEPLOY:
        env = _locked(action["environment_id"])
        actions.refuse_if_busy(env, actions.TASK_IN_PROGRESS)
        engine.check_allowed(env, TaskKind.DEPLOY)
        same_branch = commit and run.branch == (env.branch or env.project.default_branch)
        d = engine.start(env, TaskKind.DEPLOY, berth=berth,
                         trigger=trigger, record={"git_commit": commit if same_branch else None})
        return d.id, None
    fresh_copy = does == AutomationAction.COPY_DATABASE and action["fresh"]
    if does == AutomationAction.BACKUP or (fresh_copy and run.stage is None):
        env = _locked(action["source_environment_id" if fresh_copy else "environment_id"])
        backup = backups.create(env, actor=actors.of_rule(rule), berth=berth,
                                trigger=trigger, notes=f"Automation rule {rule.name!r}")
        return backup.task_id, "backup" if fresh_copy else None
    source = run.backup_id or backups.newest_completed(action["source_environment_id"])
    env = _locked(action["environment_id"])
    d = backups.restore(env, source, actor=actors.of_rule(rule), berth=berth,
                        trigger=trigger, profile=action.get("neutralize_profile"),
                        anonymize=action.get("anonymize"))
    return d.id, "restore"


def follow(d, outcome):
    """The task engine's watcher, inside the settling transaction: the run whose
    action this task is goes on to its next stage or ends. Returns that run (the
    parent of what this task's event may trigger) or None."""
    run = AutomationRun.get_or_none(AutomationRun.task == d.id, AutomationRun.status == RUNNING)
    if run is None:
        return None
    rule = AutomationRule.get_by_id(run.rule_id)
    if rule.action["type"] == AutomationAction.TEST:
        return _build_followed(rule, run, d, outcome)
    if outcome.ok and run.stage == "backup":  # copy_database: the restore comes next
        extra = d.extra_data or {}
        AutomationRun.update(stage="restore", backup_id=extra.get("backup_id"), task=None,
                             action_started=False).where(AutomationRun.id == run.id).execute()
        return _next_stage_soon(run)
    if outcome.ok and run.stage == "create" and rule.action.get("source_environment_id"):
        # A new preview: the source's data comes next.
        AutomationRun.update(stage="copy", task=None, action_started=False).where(
            AutomationRun.id == run.id).execute()
        return _next_stage_soon(run)
    return _ended(rule, run, d, outcome)


def _ended(rule, run, d, outcome):
    if outcome.ok:
        finish(rule, run, COMPLETED)
    else:
        why = outcome.error or ("cancelled" if outcome.status == states.DeploymentStatus.CANCELLED
                                else "the task failed")
        finish(rule, run, FAILED, f"{d.kind} task {d.id}: {why}")
    return run


def _next_stage_soon(run):
    """The automation job starts a run's next stage; a scheduler in this process
    takes its next turn now rather than at its interval."""
    after_commit(lambda: nudge.nudge("automation"))
    return run


def _build_followed(rule, run, d, outcome):
    """A build's stage ended: its next stage waits for the scheduler's job, or the
    run ends as the build did."""
    build = builds.of_run(run.id)
    if build is None:  # the removal of a build's environment
        return _ended(rule, run, d, outcome)
    stage = builds.follow(rule, run, build, outcome)
    if stage:
        AutomationRun.update(stage=stage, task=None, action_started=False).where(
            AutomationRun.id == run.id).execute()
        _next_stage_soon(run)
    elif build.status == builds.PASSED:
        finish(rule, run, COMPLETED)
    else:
        finish(rule, run, FAILED, f"build {build.status}: {build.reason}")
    return run


# --- reading ----------------------------------------------------------------------

def _listed(rule_id, *, shape):
    return AutomationRun.select().where(AutomationRun.rule == rule_id)


RUNS = CursorList("automation_runs", AutomationRun, _listed, newest_first=True)


def list_runs(actor, rule_id, *, limit, cursor):
    rule = rule_store.rule_for(actor, rule_id, deleted=True)
    return RUNS.page(rule.id.hex, limit=limit, cursor=cursor)


def run_now(actor, rule_id, *, berth):
    """POST …/run, `berth admin rule run`: the rule fired by the actor (`manual`),
    its action started."""
    with database.atomic():
        rule = rule_store.rule_for(actor, rule_id, lock=True)
        if not rule.enabled:
            raise AutomationRuleDisabled("The rule is disabled: enable it to run it.")
        run = begin(rule, trigger_type=AutomationTrigger.MANUAL, actor=actor.public_id)
        audit.record(rule.organization_id, "automation_rule.run", "automation_rule", rule.id,
                     {"run_id": run.id})
        with audit.quiet():  # what the rule does is its run's, recorded there
            act(rule, run, berth=berth)
    return AutomationRun.get_by_id(run.id)
