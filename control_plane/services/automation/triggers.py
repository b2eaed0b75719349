"""What fires automation rules: a push (`on_push`, inside the push delivery's
transaction), a schedule (`fire_due`, the scheduler's job), a task's end
(`after_task`, the task engine's watcher) and a person (runs.run_now).

Schedules are claimed in the database: the rule's `next_run_at` moves to the
next occurrence by a conditional update, and only the scheduler whose update
changed the row runs it, so two schedulers never run one occurrence twice. The
next occurrence is computed from now: occurrences missed while no scheduler ran
fire once, not once each.

An event rule is fired by the end of a task on its environment; the run is
recorded there and its action started by the scheduler's job (`start_pending`),
which has the settings a task needs. A chain (a rule's action ends in an event
that fires a rule…) is cut at MAX_DEPTH, and a rule is never fired by its own
action's event."""

import datetime as dt

from control_plane.events import Name
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import AutomationRule, AutomationRun, Environment
from control_plane.services.automation import previews, runs, schedules
from control_plane.services.automation import rules as rule_store
from control_plane.vocabulary import lifecycle, states
from control_plane.vocabulary.states import AutomationAction, AutomationTrigger
from protocol.kinds import TaskKind

MAX_DEPTH = 3  # event rules a chain may pass through after the first run
BATCH = 200  # due schedules (or pending runs) claimed per statement
RETRY = dt.timedelta(minutes=15)  # an expired preview whose removal could not start


def _live():
    return (AutomationRule.enabled == True) & AutomationRule.deleted_at.is_null()  # noqa: E712


# --- a push ---------------------------------------------------------------------

def on_push(project, *, branch, commit, deleted, actor, berth, base=None):
    """Inside the push delivery's transaction: the project's git_push rules whose
    glob matches the branch, fired and their actions started. A deleted branch
    fires only the preview rules that made an environment for it (to delete it).
    Returns [{rule_id, run_id, status}]."""
    if branch is None:
        return []
    fired = []
    for rule in (AutomationRule.select().where(AutomationRule.project == project.id,
                                               AutomationRule.trigger_type
                                               == AutomationTrigger.GIT_PUSH,
                                               _live()).order_by(AutomationRule.created_at)):
        if not rule_store.branch_matches(rule, branch):
            continue
        fields = {"trigger_type": AutomationTrigger.GIT_PUSH, "actor": actor or "git",
                  "branch": branch}
        if deleted:
            env = (previews.of_branch(rule, branch)
                   if rule.action["type"] == AutomationAction.PREVIEW else None)
            if env is None:
                continue
            fields.update(stage="remove", environment_id=env.id)
        run = runs.begin(rule, **fields)
        runs.act(rule, run, berth=berth, commit=commit, base=base)
        fired.append({"rule_id": str(rule.id), "run_id": str(run.id), "status": run.status})
    return fired


# --- a schedule -----------------------------------------------------------------

def fire_due(berth, now=None):
    """The scheduler's job: every schedule rule due by now fired once (claimed by
    a conditional update of its next occurrence). Returns the runs started."""
    now = now or clock.now()
    due = list(AutomationRule.select()
               .where(AutomationRule.trigger_type == AutomationTrigger.SCHEDULE, _live(),
                      AutomationRule.next_run_at <= now)
               .order_by(AutomationRule.next_run_at).limit(BATCH))
    started = []
    for rule in due:
        following = schedules.next_after(rule.trigger["cron"], rule.trigger["timezone"], now)
        with database.atomic():  # one rule a transaction: one that fails holds no other up
            claimed = AutomationRule.update(next_run_at=following).where(
                AutomationRule.id == rule.id, AutomationRule.next_run_at == rule.next_run_at,
                _live()).execute()
            if not claimed:  # another scheduler has it, or it changed meanwhile
                continue
            rule.next_run_at = following
            run = runs.begin(rule, trigger_type=AutomationTrigger.SCHEDULE, actor=runs.SCHEDULER)
            started.append(runs.act(rule, run, berth=berth))
    return started


# --- a task's end -----------------------------------------------------------------

def event_of(d, outcome):
    """The event name a settled task emitted, among those rules wait for."""
    if outcome.status == states.DeploymentStatus.CANCELLED:
        return None
    if d.kind == TaskKind.BACKUP:
        return Name.BACKUP_COMPLETED if outcome.ok else Name.BACKUP_FAILED
    if d.kind == TaskKind.RESTORE:
        return Name.RESTORE_COMPLETED if outcome.ok else None
    if lifecycle.rule(d.kind).deploy_events:
        return Name.DEPLOY_COMPLETED if outcome.ok else Name.DEPLOY_FAILED
    return None


def after_task(d, outcome, parent):
    """Inside the settling transaction: the event rules of the task's environment
    that wait for its event, fired (their actions started by `start_pending`).
    `parent`: the run whose action the task was, if any."""
    name = event_of(d, outcome)
    if name is None:
        return
    depth = parent.depth + 1 if parent is not None else 0
    for rule in (AutomationRule.select().where(
            AutomationRule.watched_environment == d.environment_id,
            AutomationRule.trigger_type == AutomationTrigger.EVENT, _live())
            .order_by(AutomationRule.created_at)):
        if rule.trigger.get("event") != name:
            continue
        fields = {"trigger_type": AutomationTrigger.EVENT, "actor": runs.SCHEDULER,
                  "depth": depth}
        if parent is not None and parent.rule_id == rule.id:
            runs.skipped(rule, reason=f"{name} came from this rule's own action", **fields)
        elif depth > MAX_DEPTH:
            runs.skipped(rule, reason=f"a chain of rules deeper than {MAX_DEPTH} is cut",
                         **fields)
        else:
            runs.begin(rule, **fields)


def start_pending(berth):
    """The scheduler's job: runs whose action (or next stage) has not started yet."""
    pending = list(AutomationRun.select(AutomationRun.id).where(
        AutomationRun.status == runs.RUNNING, ~AutomationRun.action_started)
        .order_by(AutomationRun.created_at).limit(BATCH))
    started = []
    for row in pending:
        with database.atomic():
            run = AutomationRun.get_by_id(row.id)
            rule = AutomationRule.get_by_id(run.rule_id)
            started.append(runs.act(rule, run, berth=berth))
    return started


def expire_previews(berth, now=None):
    """The scheduler's job: previews whose branch saw no push for their rule's
    ttl_hours, deleted (a run of the rule, trigger `schedule`). Claimed by moving
    the environment's last push time, so a removal that could not start (the
    environment busy) is tried again RETRY later, and never twice at once. Reads
    only live previews (an index on `preview_rule`), not the rules."""
    now = now or clock.now()
    started = []
    live = (Environment.select(Environment, AutomationRule)
            .join(AutomationRule, on=(Environment.preview_rule == AutomationRule.id))
            .where(Environment.preview_rule.is_null(False), Environment.is_active,
                   Environment.last_pushed_at.is_null(False), _live()))
    for env in live:
        rule = env.automationrule
        ttl = dt.timedelta(hours=rule.action.get("ttl_hours") or rule.action.get("keep_hours")
                           or previews.DEFAULT_TTL_HOURS)
        if env.last_pushed_at > now - ttl:
            continue
        with database.atomic():
            claimed = Environment.update(last_pushed_at=now - ttl + RETRY).where(
                Environment.id == env.id, Environment.last_pushed_at == env.last_pushed_at
            ).execute()
            if not claimed:
                continue
            run = runs.begin(rule, trigger_type=AutomationTrigger.SCHEDULE, actor=runs.SCHEDULER,
                             branch=env.branch, stage="remove", environment_id=env.id)
            started.append(runs.act(rule, run, berth=berth))
    return started


def run(berth):
    """The `automation` job: what events fired, what schedules make due, and the
    previews that outlived their branch's last push."""
    return start_pending(berth), fire_due(berth), expire_previews(berth)
