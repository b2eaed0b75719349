"""An environment's backup policy and the scheduled backups it asks for.

The policy lives on the environment's row: `enabled` (None until set: on for
`production` environments only, as Odoo.sh backs up production only), the time
of day (UTC, HH:MM, default 02:00) and how many daily, weekly and monthly copies
are kept (default 7, 4 and 3, as Odoo.sh). Read by any member of the
environment's organization, changed with `project.environments.deploy`.

The scheduler's `run` takes one `scheduled` backup a day per enabled
environment: once the day's time has come, the environment running and no task
in progress (otherwise it tries again at its next turn, until the day ends). It
also takes a backup at once of an environment whose WAL runs on a timeline no base
backup starts (after a restore in place: pitr.needs_base).
Each day's slot is claimed by a conditional UPDATE of `backup_scheduled_for`,
so that several schedulers take it once. The policy also says whether the
environment has weekly restore drills (`drills_enabled`; drills.py)."""

import datetime as dt
import logging

from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.models import Environment, Project
from control_plane.services import audit
from control_plane.services.accounts import actors
from control_plane.services.backups import backups, drills, pitr, retention
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine
from control_plane.vocabulary import states

log = logging.getLogger("berth.backups")
DEFAULT_TIME = "02:00"
FIELDS = {"time_of_day": "backup_time", "keep_daily": "backup_keep_daily",
          "keep_weekly": "backup_keep_weekly", "keep_monthly": "backup_keep_monthly"}
ENABLED_BY_DEFAULT = ("production",)


def enabled(env):
    if env.backup_enabled is None:
        return env.environment_type in ENABLED_BY_DEFAULT
    return bool(env.backup_enabled)


def slot_on(env, day):
    hours, minutes = (int(n) for n in (env.backup_time or DEFAULT_TIME).split(":"))
    return dt.datetime.combine(day, dt.time(hours, minutes))


def next_run_at(env, now=None):
    """When the next scheduled backup is due (None when disabled)."""
    if not enabled(env):
        return None
    now = now or clock.now()
    slot = slot_on(env, now.date())
    taken = env.backup_scheduled_for is not None and env.backup_scheduled_for >= slot
    return slot + dt.timedelta(days=1) if taken else max(slot, now)


def describe(env):
    return {"environment_id": env.id, "enabled": enabled(env),
            **{name: getattr(env, column) for name, column in FIELDS.items()},
            "last_scheduled_for": env.backup_scheduled_for, "next_run_at": next_run_at(env),
            "drills_enabled": drills.enabled(env),
            "last_drill_scheduled_for": env.drill_scheduled_for,
            "next_drill_at": drills.next_run_at(env)}


def get(actor, env_id):
    return describe(access.environment(actor, env_id))


def update(actor, env_id, changes):
    """Fields left out keep their value; the expiry of the environment's
    scheduled backups follows the new counts at once."""
    with database.atomic():
        env = access.environment(actor, env_id, backups.DEPLOY, lock=True)
        columns = {FIELDS[name]: value for name, value in changes.items() if name in FIELDS}
        if "enabled" in changes:
            columns["backup_enabled"] = bool(changes["enabled"])
        if "drills_enabled" in changes:
            columns["drill_enabled"] = bool(changes["drills_enabled"])
        if columns:
            columns["updated_at"] = clock.now()
            Environment.update(**columns).where(Environment.id == env.id).execute()
            for column, value in columns.items():
                setattr(env, column, value)
            audit.record(env.project.organization_id, "backup_policy.update", "environment",
                         env.id, changes)
            retention.refresh_expiry(env)
        return describe(env)


# --- the scheduler's job ------------------------------------------------------

def _enabled_clause():
    return ((Environment.backup_enabled == True)  # noqa: E712 (SQL)
            | (Environment.backup_enabled.is_null()
               & Environment.environment_type.in_(ENABLED_BY_DEFAULT)))


def _candidates():
    return (Environment.select(Environment.id).join(Project)
            .where(Environment.is_active, Project.deleted_at.is_null(),
                   Environment.status == states.EnvironmentStatus.RUNNING,
                   Environment.server.is_null(False), _enabled_clause()))


def take_due(env_id, *, berth, now=None):
    """The environment's scheduled backup if its slot is due and unclaimed, it
    runs and no task is in progress; returns the Backup or None (skipped)."""
    now = now or clock.now()
    with database.atomic():
        env = for_update(Environment.select(Environment, Project).join(Project)
                         .where(Environment.id == env_id), of=Environment).first()
        if env is None or not env.is_active or not enabled(env):
            return None
        slot = slot_on(env, now.date())
        if now < slot or (env.backup_scheduled_for and env.backup_scheduled_for >= slot):
            return None
        if env.status != states.EnvironmentStatus.RUNNING or engine.in_progress(env.id):
            return None  # not now: the next turn tries again, until the day ends
        claimed = (Environment.update(backup_scheduled_for=slot)
                   .where(Environment.id == env.id,
                          Environment.backup_scheduled_for.is_null()
                          | (Environment.backup_scheduled_for < slot)).execute())
        if not claimed:
            return None  # another scheduler took it
        backup = backups.create(env, actor=actors.SCHEDULER, berth=berth,
                                backup_type=states.BackupType.SCHEDULED,
                                notes=f"Scheduled backup of {slot:%Y-%m-%d %H:%M} UTC")
        retention.refresh_expiry(env)
        return backup


def take_new_base(env_id, *, berth):
    """A backup at once when the environment's WAL runs on a timeline no base backup
    of it starts (pitr.needs_base); returns it, or None."""
    with database.atomic():
        env = for_update(Environment.select(Environment, Project).join(Project)
                         .where(Environment.id == env_id), of=Environment).first()
        if env is None or not env.is_active or env.status != states.EnvironmentStatus.RUNNING \
                or engine.in_progress(env.id) or not pitr.needs_base(env.id):
            return None
        return backups.create(env, actor=actors.SCHEDULER, berth=berth,
                              trigger=states.Trigger.SCHEDULED,
                              notes="Base backup of the timeline a restore in place began")


def each_due(candidates, take, what):
    """take(env_id) for each candidate; what was started. Read whole first: a SELECT
    still being stepped holds its snapshot, and on SQLite a transaction begun on that
    connection after another scheduler has written fails at once ("database is
    locked") instead of waiting its turn. One environment's failure is logged."""
    started = []
    for env_id in [row.id for row in candidates]:
        try:
            done = take(env_id)
        except Exception:
            log.exception("the scheduled %s of environment %s failed to start", what, env_id)
            continue
        if done is not None:
            started.append(done)
    return started


def run(berth):
    """The scheduler's job: every due environment's scheduled backup, then its
    weekly restore drill (drills.py) where one is due. Returns the backups."""
    taken = each_due(_candidates(), lambda env_id: take_due(env_id, berth=berth)
                     or take_new_base(env_id, berth=berth), "backup")
    drills.run_due(berth, each_due)
    return taken
