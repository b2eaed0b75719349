"""Restore drills: a completed backup of an environment restored into a throwaway
copy on its server and proven there (agent/backups/drills.py: the dump loads
with every table's rows, the copy is neutralised and checked, its ERP answers
its health check, every stored attachment is there and hashes right), then
removed; the environment serves on, untouched.

A drill is a task of kind `drill` on a running environment (one task at a time,
as for any other); its record is the task, with what it proved in `extra_data`
(`backup_id`, `restore_seconds` until the copy answered, `tables`, `rows`,
`attachments`). On demand (permission `project.environments.deploy`), or weekly
by the scheduler where the environment's backup policy has drills on (default:
production environments, as for scheduled backups), of the newest completed
backup, or of a moment (`target_time`: a base backup and the archived WAL
recovered, agent/backups/pitr.py; scheduled drills alternate with the newest
moment of the window). `backup.drill_completed` or `backup.drill_failed` says how
it ended; a failed drill is an alert as a failed backup is."""

import datetime as dt
import logging

from control_plane import events
from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.infra.pagination import page_page
from control_plane.models import Backup, Deployment, Environment, Project
from control_plane.services import agents
from control_plane.services.accounts import actors
from control_plane.services.backups import pitr
from control_plane.services.backups.backups import DEPLOY, newest_completed
from control_plane.services.backups.kinds import HEALTH_TIMEOUT, require_ready, transfer_url
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import errors, states
from protocol.kinds import CommandKind, TaskKind

log = logging.getLogger("berth.backups")
EVERY = dt.timedelta(days=7)  # scheduled drills: weekly
ENABLED_BY_DEFAULT = ("production",)
MEASURED = ("restore_seconds", "tables", "rows", "attachments")
D = states.DeploymentStatus
SHOWN = {D.SUCCESS: "passed", D.FAILED: "failed", D.CANCELLED: "cancelled"}


def enabled(env):
    if env.drill_enabled is None:
        return env.environment_type in ENABLED_BY_DEFAULT
    return bool(env.drill_enabled)


def next_run_at(env, now=None):
    """When the next scheduled drill is due (None when drills are off)."""
    if not enabled(env):
        return None
    now = now or clock.now()
    last = env.drill_scheduled_for
    return now if last is None else max(now, last + EVERY)


def start(env, *, berth, actor, backup_id=None, target_time=None,
          trigger=states.Trigger.MANUAL):
    """Inside the caller's transaction, `env` locked: a `drill` task of `backup_id`
    (a completed backup of this environment; 404 otherwise, 400 unless completed),
    of the moment `target_time` (its base backup and the archived WAL; 422 outside
    the window) or of its newest completed backup (409 `no_completed_backup` if none)."""
    moment = {}
    if target_time is not None:
        require_ready(env, TaskKind.DRILL)
        target_time = pitr.parse_target(target_time)
        backup_id = pitr.check(env, env, target_time).id
        moment = {"target_time": target_time.isoformat()}
    backup_id = backup_id or newest_completed(env.id)
    backup = Backup.get_or_none(Backup.id == backup_id, Backup.environment == env.id,
                                Backup.deleted_at.is_null())
    if backup is None:
        raise errors.NotFound("Backup not found in this environment.")
    if backup.status != states.BackupStatus.COMPLETED:
        raise errors.BackupNotCompleted(
            f"Only a completed backup can be drilled; this one is {backup.status}.")
    require_ready(env, TaskKind.DRILL)
    if agents.env_agent_behind(env):
        raise errors.AgentUpgradeRequired(
            f"The server's agent ({env.server.agent_version}) cannot run restore drills: "
            "upgrade it first.")
    return engine.start(env, TaskKind.DRILL, berth=berth, trigger=trigger, actor=actor,
                        backup=backup, record={"extra_data": {"backup_id": str(backup.id),
                                                              **moment}})


def drill_now(actor, env_id, *, berth, backup_id=None, target_time=None):
    with database.atomic():
        env = access.environment(actor, env_id, DEPLOY, lock=True)
        return describe(start(env, berth=berth, actor=actor, backup_id=backup_id,
                              target_time=target_time))


def describe(d):
    extra = d.extra_data or {}
    moment = extra.get("target_time")
    return {"id": d.id, "environment_id": d.environment_id, "backup_id": extra.get("backup_id"),
            "target_time": moment and dt.datetime.fromisoformat(moment),
            "status": SHOWN.get(d.status, "running" if d.started_at else "pending"),
            "trigger": d.trigger, **{k: extra.get(k) for k in MEASURED},
            "error_message": d.error_message, "created_at": d.created_at,
            "completed_at": d.completed_at}


def page(actor, env_id, *, page=1, page_size=20):
    env = access.environment(actor, env_id)
    query = (Deployment.select().where(Deployment.environment == env.id,
                                       Deployment.kind == TaskKind.DRILL)
             .order_by(Deployment.created_at.desc(), Deployment.id.desc()))
    result = page_page(query, page=page, page_size=page_size)
    return {**result, "items": [describe(d) for d in result["items"]]}


# --- the task kind ------------------------------------------------------------------

def _payload(task, env, settings, *, backup):
    moment = (task.extra_data or {}).get("target_time")
    return {"environment_id": str(env.id), "backup_id": str(backup.id),
            "transfer_url": transfer_url(settings, backup.id), "health_timeout": HEALTH_TIMEOUT,
            **({"point_in_time": pitr.payload(env.id, backup, dt.datetime.fromisoformat(moment),
                                              settings, transfer_url)} if moment else {})}


def _settled(d, outcome, org_id, now, env_status):
    """What the agent measured (also of a failed drill) kept on the task; its event."""
    measured = {k: v for k, v in (outcome.result or {}).items() if k in MEASURED}
    extra = {**(d.extra_data or {}), **measured}
    Deployment.update(extra_data=extra).where(Deployment.id == d.id).execute()
    d.extra_data = extra
    if outcome.status != D.CANCELLED:
        events.record_drill_finished(d, org_id, outcome.ok, outcome.error)


kinds.register(kinds.Kind(
    TaskKind.DRILL, CommandKind.DRILL, _payload, is_deployment=False,
    failure="the drill failed", time_limit=lambda payload: kinds.TIME_LIMIT * 4,
    settled=_settled))


# --- the scheduler's part (policy.run) ---------------------------------------------

def _candidates(now):
    due = (Environment.drill_scheduled_for.is_null()
           | (Environment.drill_scheduled_for <= now - EVERY))
    on = ((Environment.drill_enabled == True)  # noqa: E712 (SQL)
          | (Environment.drill_enabled.is_null()
             & Environment.environment_type.in_(ENABLED_BY_DEFAULT)))
    return (Environment.select(Environment.id).join(Project)
            .where(Environment.is_active, Project.deleted_at.is_null(),
                   Environment.status == states.EnvironmentStatus.RUNNING,
                   Environment.server.is_null(False), on, due))


def take_due(env_id, *, berth, now=None):
    """The environment's weekly drill if due, it runs, is idle and has a completed
    backup; the task or None (not now: the next turn tries again)."""
    now = now or clock.now()
    with database.atomic():
        env = for_update(Environment.select(Environment, Project).join(Project)
                         .where(Environment.id == env_id), of=Environment).first()
        if env is None or not env.is_active or not enabled(env):
            return None
        if env.drill_scheduled_for is not None and env.drill_scheduled_for > now - EVERY:
            return None
        if env.status != states.EnvironmentStatus.RUNNING or engine.in_progress(env.id):
            return None
        if agents.env_agent_behind(env):
            return None  # the server's upgrade comes first; its next turn drills
        if not Backup.select().where(Backup.environment == env.id, Backup.deleted_at.is_null(),
                                     Backup.status == states.BackupStatus.COMPLETED).exists():
            return None
        claimed = (Environment.update(drill_scheduled_for=now)
                   .where(Environment.id == env.id,
                          Environment.drill_scheduled_for.is_null()
                          | (Environment.drill_scheduled_for <= now - EVERY)).execute())
        if not claimed:
            return None  # another scheduler took it
        return start(env, berth=berth, actor=actors.SCHEDULER, trigger=states.Trigger.SCHEDULED,
                     target_time=_next_moment(env))


def _next_moment(env):
    """Scheduled drills alternate: the newest backup, then (where the environment's
    WAL is archived) the newest moment of its window, then the newest backup..."""
    last = (Deployment.select().where(Deployment.environment == env.id,
                                      Deployment.kind == TaskKind.DRILL,
                                      Deployment.trigger == states.Trigger.SCHEDULED)
            .order_by(Deployment.created_at.desc()).first())
    if last is None or (last.extra_data or {}).get("target_time"):
        return None
    span = pitr.window(env.id)
    return span and span[1]


def run_due(berth, each_due, now=None):
    """`each_due`: policy.each_due, the scheduler's way through due environments."""
    now = now or clock.now()
    return each_due(_candidates(now), lambda env_id: take_due(env_id, berth=berth, now=now),
                    "drill")
