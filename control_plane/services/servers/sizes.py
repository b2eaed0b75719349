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

from control_plane import events
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Backup, Environment, EnvironmentMetric, Project
from control_plane.services.environment_settings import access
from control_plane.services.servers import history
from control_plane.vocabulary.states import BackupStatus

DAY = dt.timedelta(days=1)
WINDOW = dt.timedelta(hours=2)  # how far from exactly a day ago a history point may be
RE_ARM = 0.8
BACKUPS_SHOWN = 10
FIGURES = ("database_bytes", "filestore_bytes")
BATCH = 500  # environments whose history points are read in one statement


def _day_ago(env_ids, now):
    """{environment id: its hour point of the metric history nearest a day before now},
    in one statement for the environments (those without one are left out)."""
    target = history.unix(now - DAY)
    nearest = {}
    for point in (EnvironmentMetric.select()
                  .where(EnvironmentMetric.step == 3600,
                         EnvironmentMetric.at.between(target - WINDOW.seconds,
                                                      target + WINDOW.seconds),
                         EnvironmentMetric.environment_id.in_(env_ids))):
        best = nearest.get(point.environment_id)
        if best is None or abs(point.at - target) < abs(best.at - target):
            nearest[point.environment_id] = point
    return nearest


def growth(env, point):
    """{database_bytes_per_day, filestore_bytes_per_day, since} from the history point
    (of about a day ago) to the latest measurement; None without both."""
    if env.disk_measured_at is None or point is None:
        return None
    days = max(history.unix(env.disk_measured_at) - point.at, 1) / DAY.total_seconds()
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
        "growth": growth(env, _day_ago([env.id], clock.now()).get(env.id)),
    }


def watch_growth(berth, now=None):
    """The scheduler's job: the alerts due, and the environments re-armed. Returns
    the number of alerts sent."""
    limit = berth.settings["GROWTH_ALERT_MB_PER_DAY"] * 1024 * 1024
    if not limit:
        return 0
    now, sent = now or clock.now(), 0
    measured = list(Environment.select(Environment, Project).join(Project)
                    .where(Environment.is_active, Environment.disk_measured_at > now - WINDOW,
                           Project.deleted_at.is_null()))
    for batch in range(0, len(measured), BATCH):
        envs = measured[batch:batch + BATCH]
        points = _day_ago([env.id for env in envs], now)
        for env in envs:
            rates = growth(env, points.get(env.id))
            if rates is not None:
                sent += _alert_or_re_arm(env, rates, limit, now)
    return sent


def _alert_or_re_arm(env, rates, limit, now):
    """1 when this turn sent the environment's alert."""
    fastest = max((rates[f"{n}_per_day"] or 0, n) for n in FIGURES)
    if fastest[0] > limit and env.growth_alerted_at is None:
        with database.atomic():
            claimed = Environment.update(growth_alerted_at=now).where(
                Environment.id == env.id, Environment.growth_alerted_at.is_null()).execute()
            if claimed:
                events.record_disk_growth(env, fastest[1], rates, limit)
                return 1
    elif fastest[0] < limit * RE_ARM and env.growth_alerted_at is not None:
        Environment.update(growth_alerted_at=None).where(Environment.id == env.id).execute()
    return 0
