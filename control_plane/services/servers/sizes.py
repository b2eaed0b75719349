"""What an environment's size is made of, and how fast it grows.

The size report (GET /environments/{id}/size) puts together what the agent last
measured with the disk use (agent/metrics/size.py: the database's largest tables, the
filestore's files, attachments whose file is missing and files no attachment names),
the environment's backups and their stored sizes, and the growth over the last day,
read from the metric history (the database's and the filestore's bytes a day ago).

The growth watch (scheduler job `size-growth`) sends `environment.disk_growth` once
when the database or the filestore grew by more than CP_GROWTH_ALERT_MB_PER_DAY over
the last day; it is sent again only after the growth fell below RE_ARM of that rate.
Claimed by a conditional update, so several schedulers send it once. Environments on
servers reached over SSH have no history of their own, so no growth and no alert."""

import datetime as dt

from peewee import fn

from control_plane import events
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Backup, Environment, EnvironmentMetric, Project
from control_plane.services.environment_settings import access
from control_plane.vocabulary.states import BackupStatus

DAY = dt.timedelta(days=1)
WINDOW = dt.timedelta(hours=2)  # how far from exactly a day ago a history point may be
RE_ARM = 0.8
BACKUPS_SHOWN = 10
FIGURES = ("database_bytes", "filestore_bytes")


def _epoch(moment):
    return int(moment.replace(tzinfo=dt.UTC).timestamp())


def growth(env, now=None):
    """{database_bytes_per_day, filestore_bytes_per_day, since} from the history point
    nearest a day ago and the latest measurement; None without both."""
    now = now or clock.now()
    if env.disk_measured_at is None:
        return None
    target = _epoch(now - DAY)
    point = (EnvironmentMetric.select()
             .where(EnvironmentMetric.environment_id == env.id,
                    EnvironmentMetric.at.between(target - WINDOW.seconds,
                                                 target + WINDOW.seconds))
             .order_by(fn.ABS(EnvironmentMetric.at - target), EnvironmentMetric.at).first())
    if point is None:
        return None
    days = max(_epoch(env.disk_measured_at) - point.at, 1) / DAY.total_seconds()
    out = {"since": dt.datetime.fromtimestamp(point.at, dt.UTC).replace(tzinfo=None)}
    for name in FIGURES:
        was, now_bytes = getattr(point, name), getattr(env, f"disk_{name}")
        out[f"{name}_per_day"] = (None if was is None or now_bytes is None
                                  else round((now_bytes - was) / days))
    return out


def size_report(actor, environment_id):
    env = access.environment(actor, environment_id)
    made_of = env.disk_made_of or {}
    backups = (Backup.select().where(Backup.environment == env.id,
                                     Backup.status == BackupStatus.COMPLETED)
               .order_by(Backup.created_at.desc()).limit(BACKUPS_SHOWN))
    return {
        "environment_id": env.id, "measured_at": env.disk_measured_at,
        "database_bytes": env.disk_database_bytes, "filestore_bytes": env.disk_filestore_bytes,
        "addons_bytes": env.disk_addons_bytes,
        "largest_tables": made_of.get("largest_tables"),
        "filestore_files": made_of.get("filestore_files"),
        "attachments_missing": made_of.get("attachments_missing"),
        "files_orphaned": made_of.get("files_orphaned"),
        "missing_sample": made_of.get("missing_sample"),
        "backups": [{"id": b.id, "created_at": b.created_at, "total_size": b.total_size,
                     "compressed_size": b.compressed_size} for b in backups],
        "growth": growth(env),
    }


def watch_growth(berth, now=None):
    """The scheduler's job: the alerts due, and the environments re-armed. Returns
    the number of alerts sent."""
    limit = berth.settings["GROWTH_ALERT_MB_PER_DAY"] * 1024 * 1024
    if not limit:
        return 0
    now, sent = now or clock.now(), 0
    measured = (Environment.select(Environment, Project).join(Project)
                .where(Environment.is_active, Environment.disk_measured_at > now - WINDOW,
                       Project.deleted_at.is_null()))
    for env in measured:
        rates = growth(env, now)
        if rates is None:
            continue
        fastest = max((rates[f"{n}_per_day"] or 0, n) for n in FIGURES)
        if fastest[0] > limit and env.growth_alerted_at is None:
            with database.atomic():
                claimed = Environment.update(growth_alerted_at=now).where(
                    Environment.id == env.id, Environment.growth_alerted_at.is_null()).execute()
                if claimed:
                    events.record_disk_growth(env, fastest[1], rates, limit)
                    sent += 1
        elif fastest[0] < limit * RE_ARM and env.growth_alerted_at is not None:
            Environment.update(growth_alerted_at=None).where(Environment.id == env.id).execute()
    return sent
