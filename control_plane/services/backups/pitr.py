"""Restores to a point in time: a base backup (the physical copy a backup of an
archiving environment holds, `manifest.base`) recovered by the agent with the
archived WAL after it up to `target_time`, and the filestore the recovered
database references (services/backups/wal.py keeps both archives).

The window of an environment runs from the first base backup whose WAL follows it
without a gap to the moment PostgreSQL finished the newest archived file of that
run (`archived_at`; for files from an agent that sends none, when it was stored).
A target outside it is a 422 that names it."""

import datetime as dt

from control_plane.models import Backup, Environment, WalFile
from control_plane.services import agents
from control_plane.vocabulary import errors, states
from protocol import filestore_objects as fo
from protocol import wal


def bases(env_id):
    """The environment's kept completed backups that hold a base, oldest first."""
    kept = (Backup.select().where(Backup.environment == env_id, Backup.deleted_at.is_null(),
                                  Backup.status == states.BackupStatus.COMPLETED)
            .order_by(Backup.completed_at))
    return [b for b in kept if isinstance((b.manifest or {}).get("base"), dict)
            and b.completed_at is not None]


def _archived(row):
    return row.archived_at or row.stored_at


def _run(env_id, backup):
    """The stored WAL segments that follow the backup's base without a gap, in order."""
    base = backup.manifest["base"]
    try:
        timeline = int(base["timeline"])
        first = wal.segment_number(wal.segment_of_lsn(timeline, base["start_lsn"]))[1]
    except (KeyError, TypeError, ValueError):
        return []
    prefix = f"{base['system_identifier']}/{timeline:08X}"
    rows = {}
    for row in WalFile.select().where(WalFile.environment == env_id, WalFile.path.is_null(),
                                      WalFile.name.startswith(prefix),
                                      WalFile.stored_at.is_null(False)):
        found = wal.segment_number(row.name.partition("/")[2].rsplit(".", 1)[0])
        if found and found[1] >= first:
            rows[found[1]] = row
    run, number = [], first
    while number in rows:
        run.append(rows[number])
        number += 1
    return run


def window(env_id):
    """(start, end) of the moments the environment can be brought back to, or None."""
    spans = [(b.completed_at, _archived(run[-1])) for b in bases(env_id)
             if (run := _run(env_id, b)) and _archived(run[-1]) >= b.completed_at]
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def _iso(moment):
    return moment.replace(microsecond=0).isoformat() + "Z" if moment else None


def window_fields(env_id):
    span = window(env_id)
    return {"window_start": span and span[0], "window_end": span and span[1]}


def check(env, source_env, target_time):
    """The base backup a restore of `source_env` at `target_time` (naive UTC) starts
    from; 422 outside the window, 409 when the restoring server's agent is older."""
    if agents.env_agent_behind(env):
        raise errors.AgentUpgradeRequired(
            "A restore to a point in time needs the server's agent of this release. "
            "Upgrade the agent first.")
    for backup in reversed(bases(source_env.id)):
        if backup.completed_at > target_time:
            continue
        run = _run(source_env.id, backup)
        if run and _archived(run[-1]) >= target_time:
            return backup
        break
    span = window(source_env.id)
    where = (f"from {_iso(span[0])} to {_iso(span[1])}" if span else
             "empty: no backup of it holds a base with its WAL archived after it")
    why = (f"target_time {_iso(target_time)} is outside the environment's point-in-time "
           f"window, {where}.")
    raise errors.Unprocessable(why, details={"target_time": [why]},
                               window_start=_iso(span and span[0]),
                               window_end=_iso(span and span[1]))


def payload(source_env_id, base, target_time, settings, transfer_url):
    """The restore command's `point_in_time`: the WAL from the base's segment to the
    first one PostgreSQL finished after the target, the filestore files archived,
    and the maps of the environment's other kept backups, newest first (one may hold
    a file the database at the target names that the shipper did not send again: a
    file's content never changes)."""
    names = []
    for row in _run(source_env_id, base):
        names.append([row.name, row.sha256])
        if _archived(row) > target_time:
            break
    files = [[r.path, r.name] for r in WalFile.select(WalFile.path, WalFile.name).where(
        WalFile.environment == source_env_id, WalFile.path.is_null(False),
        WalFile.stored_at.is_null(False)).order_by(WalFile.stored_at)]
    others = (Backup.select().where(
        Backup.environment == source_env_id, Backup.deleted_at.is_null(), Backup.id != base.id,
        Backup.status == states.BackupStatus.COMPLETED).order_by(Backup.created_at.desc()))
    maps = [{"backup_id": str(b.id), "transfer_url": transfer_url(settings, b.id),
             "filestore": b.manifest["filestore"]} for b in others
            if ((b.manifest or {}).get("filestore") or {}).get("layout") == fo.LAYOUT]
    base_url = settings["PUBLIC_URL"].rstrip("/")
    return {"target_time": target_time.isoformat() + "Z", "base_backup_id": str(base.id),
            "base": base.manifest["base"], "wal_url": f"{base_url}/agent/v1/wal/{source_env_id}",
            "wal": names, "files": files, "maps": maps}


def source_environment(env, source_env_id):
    """The environment a point-in-time restore reads: this one, or another of its
    project (404 otherwise)."""
    if source_env_id is None or source_env_id == env.id:
        return env
    source = Environment.get_or_none(Environment.id == source_env_id,
                                     Environment.project == env.project_id)
    if source is None:
        raise errors.NotFound("Source environment not found in this environment's project.")
    return source


def parse_target(value):
    """A target time as stored (naive UTC); 422 for one no calendar holds in UTC."""
    if value.tzinfo is not None:
        try:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            why = "target_time: not a moment in UTC's calendar."
            raise errors.Unprocessable(why, details={"target_time": [why]}) from None
    return value
