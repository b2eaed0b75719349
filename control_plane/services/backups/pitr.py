"""Restores to a point in time: a base backup (the physical copy a backup of an
archiving environment holds, `manifest.base`) recovered by the agent with the
archived WAL after it up to `target_time`, and the filestore the recovered
database references (services/backups/wal.py keeps both archives).

The window of an environment runs from the first base backup whose WAL follows it
without a gap to the moment PostgreSQL finished the newest archived file of that
run (`archived_at`; for files from an agent that sends none, when it was stored).
A target outside it is a 422 that names it."""

import datetime as dt

from peewee import fn

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


class _Archive:
    """An environment's stored WAL segments, read once: {(system identifier,
    timeline): {segment number: (name, sha256, when finished)}} (tuples, not rows:
    a week of WAL is thousands of files, read on every status)."""

    def __init__(self, env_id):
        self.segments = {}
        for name, sha256, archived, stored in (
                WalFile.select(WalFile.name, WalFile.sha256, WalFile.archived_at,
                               WalFile.stored_at)
                .where(WalFile.environment == env_id, WalFile.path.is_null(),
                       WalFile.stored_at.is_null(False)).tuples()):
            system_id, _, file = name.partition("/")
            found = wal.segment_number(file.rsplit(".", 1)[0])
            if found:
                self.segments.setdefault((system_id, found[0]), {})[found[1]] = (
                    name, sha256, archived or stored)

    def run(self, backup):
        """The segments that follow the backup's base without a gap, in order."""
        base = backup.manifest["base"]
        try:
            timeline = int(base["timeline"])
            number = wal.segment_number(wal.segment_of_lsn(timeline, base["start_lsn"]))[1]
        except (KeyError, TypeError, ValueError):
            return []
        found, run = self.segments.get((str(base.get("system_identifier")), timeline), {}), []
        while number in found:
            run.append(found[number])
            number += 1
        return run


def _spans(env_id):
    """[(base backup, its run)] of the bases whose run reaches past their completion."""
    archive = _Archive(env_id)
    return [(b, run) for b in bases(env_id)
            if (run := archive.run(b)) and run[-1][2] >= b.completed_at]


def window(env_id):
    """(start, end) of the moments the environment can be brought back to, or None."""
    spans = _spans(env_id)
    if not spans:
        return None
    return min(b.completed_at for b, _ in spans), max(run[-1][2] for _, run in spans)


def needs_base(env_id):
    """Whether the environment archives WAL of a timeline or cluster that its newest
    base backup does not start, since before its newest backup was asked for: after a
    restore in place (its cluster goes on on a new timeline), moments are
    restorable again from a base backup of it, which the scheduler takes at once."""
    kept = bases(env_id)
    if not kept:
        return False
    base = kept[-1].manifest["base"]
    try:
        prefix = f"{base['system_identifier']}/{int(base['timeline']):08X}"
    except (KeyError, TypeError, ValueError):
        return False
    first = (WalFile.select(fn.MIN(WalFile.stored_at))
             .where(WalFile.environment == env_id, WalFile.path.is_null(),
                    WalFile.stored_at > kept[-1].completed_at,
                    ~WalFile.name.startswith(prefix)).scalar())
    asked = (Backup.select(fn.MAX(Backup.created_at))
             .where(Backup.environment == env_id).scalar())
    return first is not None and (asked is None or first > asked)


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
    spans = _spans(source_env.id)
    for backup, run in reversed(spans):
        if backup.completed_at <= target_time:
            if run[-1][2] >= target_time:
                return backup
            break
    span = spans and (min(b.completed_at for b, _ in spans), max(r[-1][2] for _, r in spans))
    where = (f"from {_iso(span[0])} to {_iso(span[1])}" if span else
             "empty: no backup of it holds a base with its WAL archived after it")
    why = (f"target_time {_iso(target_time)} is outside the environment's point-in-time "
           f"window, {where}.")
    raise errors.OutsideWindow(why, details={"target_time": [why]},
                               window_start=_iso(span and span[0]),
                               window_end=_iso(span and span[1]))


def payload(source_env_id, base, target_time, settings, transfer_url):
    """The restore command's `point_in_time`: the WAL from the base's segment to the
    first one PostgreSQL finished after the target, the filestore files archived,
    and the maps of the environment's other kept backups, newest first (one may hold
    a file the database at the target names that the shipper did not send again: a
    file's content never changes)."""
    names = []
    for name, sha256, finished in _Archive(source_env_id).run(base):
        names.append([name, sha256])
        if finished > target_time:
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
            "environment_id": str(source_env_id), "base": base.manifest["base"],
            "wal_url": f"{base_url}/agent/v1/wal/{source_env_id}", "wal": names,
            **_timelines(source_env_id, base), "files": files, "maps": maps}


def _timelines(env_id, base):
    """The archived history files of the base's cluster and its newest timeline: the
    recovery picks a timeline none of them used (a restore in place archives its new
    one beside them)."""
    system_id, history, newest = str(base.manifest["base"].get("system_identifier")), [], 1
    for name, sha256 in (WalFile.select(WalFile.name, WalFile.sha256).where(
            WalFile.environment == env_id, WalFile.path.is_null(),
            WalFile.stored_at.is_null(False),
            WalFile.name.startswith(f"{system_id}/")).tuples()):
        file = name.partition("/")[2].rsplit(".", 1)[0]
        if file.endswith(".history"):
            history.append([name, sha256])
        if (timeline := wal.timeline_of(file)) is not None:
            newest = max(newest, timeline)
    return {"history": sorted(history), "newest_timeline": newest}


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
