"""How long backups are kept, and the scheduler's job that deletes them.

Every backup has an `expires_at`:
- `manual` (safety backups of restores too): 30 days after it was taken;
  `pre_deploy`: 7 days (tasks.FIXED_RETENTION).
- `scheduled` (grandfather-father-son): a daily copy kept `keep_daily` days;
  the first scheduled backup of an ISO week (not failed nor cancelled) is also
  the week's copy, kept `keep_weekly` weeks; the first of a calendar month the
  month's, kept `keep_monthly` months; the longest applies. With one backup a
  day this keeps as many copies as the counts say. `refresh_expiry` recomputes
  them when a scheduled backup starts, when the policy changes and before each
  sweep (a failed first backup of the week hands the week on to the next one).
- An environment deleted or destroyed (or in a deleted project): its backups
  are kept until their own `expires_at`, at most 30 days after its removal.

`sweep` deletes each expired backup's objects (and aborts any multipart upload
still open on it), then marks it `deleted_at`: it is no longer listed,
downloadable or restorable. Backups in progress, and those a running restore
reads, wait for the next sweep.

Imports (files uploaded to be restored) are kept IMPORT_KEEP_DAYS after their
upload began, long enough to retry a failed restore: `sweep_imports` then
deletes the file (or aborts its unfinished upload) and the import itself,
unless a restore is reading it."""

import calendar
import datetime as dt
import logging

from control_plane.infra import clock
from control_plane.models import Backup, BackupImport, Deployment, Environment
from control_plane.services.backups import objects, stores, transfers
from control_plane.vocabulary import states

log = logging.getLogger("berth.backups")
B = states.BackupStatus
REMOVED_ENVIRONMENT = dt.timedelta(days=30)
PROMOTABLE = (B.PENDING, B.RUNNING, B.COMPLETED)
IMPORT_KEEP_DAYS = 7


def add_months(when, months):
    month = when.month - 1 + months
    year, month = when.year + month // 12, month % 12 + 1
    return when.replace(year=year, month=month,
                        day=min(when.day, calendar.monthrange(year, month)[1]))


def expiry(created_at, *, weekly, monthly, keep_daily, keep_weekly, keep_monthly):
    """A scheduled backup's end: its longest role (daily, the week's, the month's)."""
    ends = [created_at + dt.timedelta(days=keep_daily)]
    if weekly:
        ends.append(created_at + dt.timedelta(weeks=keep_weekly))
    if monthly:
        ends.append(add_months(created_at, keep_monthly))
    return max(ends)


def removed_cap(env):
    """The latest end of a removed environment's backups (None while active)."""
    if env.is_active and env.project.deleted_at is None:
        return None
    return (env.updated_at or clock.now()) + REMOVED_ENVIRONMENT


def refresh_expiry(env):
    """Every listed scheduled backup of the environment gets the `expires_at` of
    its roles under the environment's policy (capped once it is removed)."""
    rows = (Backup.select().where(Backup.environment == env.id, Backup.deleted_at.is_null(),
                                  Backup.backup_type == "scheduled")
            .order_by(Backup.created_at, Backup.id))
    weeks, months, cap = set(), set(), removed_cap(env)
    for backup in rows:
        weekly = monthly = False
        if backup.status in PROMOTABLE:
            week, month = backup.created_at.isocalendar()[:2], backup.created_at.timetuple()[:2]
            weekly, monthly = week not in weeks, month not in months
            weeks.add(week)
            months.add(month)
        end = expiry(backup.created_at, weekly=weekly, monthly=monthly,
                     keep_daily=env.backup_keep_daily, keep_weekly=env.backup_keep_weekly,
                     keep_monthly=env.backup_keep_monthly)
        if cap is not None:
            end = min(end, cap)
        if backup.expires_at != end:
            Backup.update(expires_at=end).where(Backup.id == backup.id).execute()


def _cap_removed():
    """Backups of removed environments end at the latest 30 days after removal."""
    removed = (Environment.select().join_from(Environment, Backup)
               .where(Environment.is_active == False,  # noqa: E712 (SQL)
                      Backup.deleted_at.is_null()).distinct())
    for env in removed:
        cap = removed_cap(env)
        (Backup.update(expires_at=cap)
         .where(Backup.environment == env.id, Backup.deleted_at.is_null(),
                Backup.expires_at.is_null() | (Backup.expires_at > cap)).execute())


def _refresh_scheduled():
    envs = (Environment.select().join_from(Environment, Backup)
            .where(Environment.is_active, Backup.deleted_at.is_null(),
                   Backup.backup_type == "scheduled").distinct())
    for env in envs:
        refresh_expiry(env)


def _read_by_a_restore(backup):
    return (Backup.select().join(Deployment, on=(Backup.task == Deployment.id))
            .where(Backup.source_backup == backup.id,
                   Deployment.status.in_(states.DEPLOYMENT_IN_PROGRESS)).exists())


def delete(backup, store, now):
    """The backup's objects and open uploads removed, then the row marked;
    False when another sweep marked it first."""
    for name, upload_id in (backup.uploads or {}).items():
        try:
            store.abort_upload(transfers.storage_key(backup, name), upload_id)
        except Exception:  # gone already: the prefix's deletion removes what is left
            log.warning("aborting upload %s of backup %s failed", name, backup.id, exc_info=True)
    if backup.storage_prefix:
        _remove_prefix(store, backup.storage_prefix)
    return bool(Backup.update(deleted_at=now, uploads={})
                .where(Backup.id == backup.id, Backup.deleted_at.is_null()).execute())


def _remove_prefix(store, prefix):
    """Everything under the prefix: unfinished uploads aborted, objects deleted."""
    store.abort_uploads(prefix)
    store.delete_prefix(prefix)


def sweep(berth, now=None):
    """The scheduler's job: expired backups deleted; returns their ids."""
    now = now or clock.now()
    _cap_removed()
    _refresh_scheduled()
    expired = Backup.select().where(Backup.deleted_at.is_null(), Backup.expires_at <= now,
                                    Backup.status.not_in(states.BACKUP_IN_PROGRESS))
    store, deleted = None, []
    for backup in expired:
        if _read_by_a_restore(backup):
            continue
        store = store or stores.for_settings(berth.settings)
        try:
            if delete(backup, store, now):
                deleted.append(backup.id)
        except Exception:
            log.exception("deleting expired backup %s failed; the next sweep tries again",
                          backup.id)
    collected = objects.collect(store or stores.for_settings(berth.settings), now)
    if collected:
        log.info("deleted %d filestore pack(s) no kept backup needs", collected)
    return deleted


def sweep_imports(berth, now=None):
    """The scheduler's job: imports older than IMPORT_KEEP_DAYS removed from storage
    and forgotten (404 from then on); returns their ids."""
    now = now or clock.now()
    old = BackupImport.select().where(
        BackupImport.created_at <= now - dt.timedelta(days=IMPORT_KEEP_DAYS))
    store, removed = None, []
    for imp in old:
        if imp.task_id and Deployment.select().where(
                Deployment.id == imp.task_id,
                Deployment.status.in_(states.DEPLOYMENT_IN_PROGRESS)).exists():
            continue  # a restore is reading it
        store = store or stores.for_settings(berth.settings)
        try:
            _remove_prefix(store, imp.storage_key.rsplit("/", 1)[0] + "/")
        except Exception:
            log.exception("deleting import %s failed; the next sweep tries again", imp.id)
            continue
        # Conditional: a restore started since the check above keeps the row.
        if BackupImport.delete().where(BackupImport.id == imp.id,
                                       BackupImport.task == imp.task_id).execute():
            removed.append(imp.id)
    return removed
