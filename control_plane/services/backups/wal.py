"""Continuous WAL archiving (protocol/wal.py): an environment whose backups are on
archives its PostgreSQL's write-ahead log to backup storage, through its
server's agent, from its next deploy on.

The agent uploads each finished WAL file as an object of the environment's
cluster (`<system identifier>/<file>.zst`) through the transfer API
(/agent/v1/wal/<environment>/...); the control plane reads each one back, checks
its size and SHA-256 and only then records it (`WalFile.stored_at`). A name is
stored once: PostgreSQL gives a name one content within a cluster.

The agent reports the archiving every 30 s; `watch` (a scheduler job) alerts
once when it fails (`backup.archiving_failed`: an upload or PostgreSQL's
`archive_command` failing, a finished file waiting over ALERT_AFTER, no report
for as long, or a gap in the archive) and once when it works again
(`backup.archiving_recovered`).
`sweep` keeps the WAL of the policy's window (`keep_daily` days) from the
backup it starts from on, and removes what is behind that backup."""

import datetime as dt
import logging
import re

from peewee import fn

from control_plane import events, storage
from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.models import (
    Backup,
    BackupPack,
    Environment,
    FilestoreObject,
    FilestorePack,
    WalFile,
)
from control_plane.services.backups import pitr, policy, stores, transfers
from control_plane.services.environment_settings import access
from control_plane.vocabulary import errors, states
from protocol import wal

log = logging.getLogger("berth.backups")
URL_SECONDS = 3600
ALERT_AFTER = 300  # seconds a finished WAL file may wait, or the agent stay silent
ABANDONED = dt.timedelta(days=1)  # an upload never completed is dropped after this
SYSTEM_ID = re.compile(r"[0-9]{1,20}")  # a cluster's identifier: a 64-bit number


def enabled(env):
    """Archiving follows the environment's backups, on a server with a resident
    agent: one reached over SSH runs no shipper between calls, and its spool would
    only fill the disk."""
    return policy.enabled(env) and env.server_id is not None and \
        env.server.connection == states.Connection.AGENT


def agent_fields(env, settings):
    """The deploy payload's `wal_archiving`: where the agent ships the WAL to and
    PostgreSQL's `archive_timeout`; None turns archiving off."""
    if not enabled(env):
        return {"wal_archiving": None}
    base = settings["PUBLIC_URL"].rstrip("/")
    return {"wal_archiving": {"transfer_url": f"{base}/agent/v1/wal/{env.id}",
                              "archive_timeout": wal.ARCHIVE_TIMEOUT}}


def check_name(name):
    system_id, _, file = (name or "").partition("/")
    if not (SYSTEM_ID.fullmatch(system_id) and wal.is_object_name(file)
            or wal.is_filestore_object(name)):
        raise errors.Unprocessable("object: <system identifier>/<WAL file name>.zst or .gz, "
                                   "or files/<sha256>.zst or .gz.")
    return name


def key_of(env_id, name):
    return f"wal/{env_id}/{name}"


def _environment(server, env_id, lock=False):
    query = Environment.select().where(Environment.id == env_id,
                                       Environment.server == server.id)
    env = (for_update(query) if lock else query).first()
    if env is None:
        raise errors.NotFound("Environment not found.")
    return env


def _file(env, name, begun=None):
    """The name's row, made with the upload `begun` unless one was begun first."""
    row = for_update(WalFile.select().where(WalFile.environment == env.id,
                                            WalFile.name == name)).first()
    if row is None and begun:
        row = WalFile.create(environment=env.id, name=name, key=key_of(env.id, name),
                             upload_id=begun)
    return row


def known(server, env_id, names):
    """{stored: [names]}: which of the names are stored already (the agent drops
    those from its spool instead of sending them again)."""
    env = _environment(server, env_id)
    for name in names:
        check_name(name)
    stored = {r.name for r in WalFile.select(WalFile.name).where(
        WalFile.environment == env.id, WalFile.name.in_(list(names)),
        WalFile.stored_at.is_null(False))}
    # A filestore file whose content a kept backup of the environment holds is not sent
    # again: a point-in-time restore reads those backups' maps (pitr.py).
    files = {name[len("files/"):64 + len("files/")]: name for name in names
             if wal.is_filestore_object(name)}
    kept = (BackupPack.select(BackupPack.pack).join(Backup)
            .where(Backup.environment == env.id, Backup.deleted_at.is_null()))
    packed = (FilestoreObject.select(FilestoreObject.sha256).join(FilestorePack)
              .where(FilestoreObject.project == env.project_id,
                     FilestoreObject.sha256.in_(sorted(files) or [""]),
                     FilestorePack.id.in_(kept), FilestorePack.deleted_at.is_null()))
    stored |= {files[r.sha256] for r in packed}
    return {"stored": sorted(stored)}


def part_url(server, env_id, name, part_number, berth):
    check_name(name)
    store = stores.for_settings(berth.settings)
    with database.atomic():
        row = _file(_environment(server, env_id, lock=True), name)
    if row is not None and row.stored_at is not None:
        raise errors.Conflict("This WAL file is stored already.")
    if row is None or not row.upload_id:
        begun = store.begin_upload(key_of(env_id, name))
        with database.atomic():
            env = _environment(server, env_id, lock=True)
            row = _file(env, name, begun=begun)
            if not row.upload_id:
                WalFile.update(upload_id=begun).where(WalFile.id == row.id).execute()
                row.upload_id = begun
        if row.upload_id != begun:
            store.abort_upload(row.key, begun)
    return {"url": store.part_url(row.key, row.upload_id, part_number, expires=URL_SECONDS)}


def complete(server, env_id, name, parts, size, sha256, berth, archived_at=None, path=None):
    """The file joined in storage, read back and recorded when it matches what the
    agent sent, with when PostgreSQL finished it (`archived_at`) or, a filestore
    file, its `path`. Returns {size, sha256} as read back."""
    check_name(name)
    if wal.is_filestore_object(name) != bool(path) or path and (
            not path.startswith(wal.FILESTORE_DIR) or ".." in path.split("/")):
        raise errors.Unprocessable("path: a filestore file's, and only its (under "
                                   f"{wal.FILESTORE_DIR}).")
    store = stores.for_settings(berth.settings)
    with database.atomic():
        row = _file(_environment(server, env_id, lock=True), name)
    if row is None or not row.upload_id:
        raise errors.Conflict("No upload of this WAL file was begun (ask for a part URL).")
    store.complete_upload(row.key, row.upload_id,
                          sorted((p["part_number"], p["etag"]) for p in parts))
    stored = storage.read_back(store, row.key)
    if stored != {"size": size, "sha256": sha256}:
        WalFile.update(upload_id=None).where(WalFile.id == row.id).execute()
        raise errors.Unprocessable(
            f"{name} in storage does not match what was sent: {stored['size']} bytes, sha256 "
            f"{stored['sha256']}; sent {size} bytes, sha256 {sha256}.")
    with database.atomic():
        WalFile.update(upload_id=None, stored_at=clock.now(), path=path,
                       archived_at=_parsed(archived_at), **stored).where(
            WalFile.id == row.id).execute()
        if gap := _gap_before(row):
            log.warning("WAL archive of environment %s: %s missing", env_id, gap)
            Environment.update(wal_gap=gap, wal_gap_at=clock.now()).where(
                Environment.id == row.environment_id).execute()
    return stored


def _gap_before(row):
    """The segments missing between this one and the newest one stored before it of
    its cluster and timeline ("first..last"), or None. The shipper sends them in
    order and never skips one: a gap is WAL lost on the server (a spool file gone)."""
    system_id, _, file = row.name.partition("/")
    this = wal.segment_number(file.rsplit(".", 1)[0])
    if this is None:  # a history or backup label file
        return None
    timeline, number = this
    prefix = f"{system_id}/{timeline:08X}"
    segments = [len(f"{system_id}/") + 24 + len(suffix) for suffix in (".zst", ".gz")]
    before = (WalFile.select(fn.MAX(WalFile.name))
              .where(WalFile.environment == row.environment_id, WalFile.name < row.name,
                     WalFile.name.startswith(prefix), fn.LENGTH(WalFile.name).in_(segments),
                     WalFile.stored_at.is_null(False))
              .scalar())
    previous = before and wal.segment_number(before.partition("/")[2].rsplit(".", 1)[0])
    if not previous or previous[1] >= number - 1:
        return None
    return (f"{wal.segment_name(timeline, previous[1] + 1)}.."
            f"{wal.segment_name(timeline, number - 1)}")


def download_url(server, env_id, name, berth):
    """`{url}` for a GET of a stored file of the environment's archive: its server's,
    or a server restoring from the environment (a point-in-time restore)."""
    check_name(name)
    on = Environment.select().where(Environment.id == env_id, Environment.server == server.id)
    if not (on.exists() or transfers.reading_on(env_id, server)):
        raise errors.NotFound("Environment not found.")
    row = WalFile.get_or_none(WalFile.environment == env_id, WalFile.name == name,
                              WalFile.stored_at.is_null(False))
    if row is None:
        raise errors.NotFound("The archive holds no such file.")
    store = stores.for_settings(berth.settings)
    return {"url": store.get_url(row.key, expires=URL_SECONDS)}


def report(server, env_id, body):
    """The agent's report of the environment's archiving, kept as it came."""
    with database.atomic():
        env = _environment(server, env_id, lock=True)
        Environment.update(wal_report=body, wal_reported_at=clock.now()).where(
            Environment.id == env.id).execute()
    return {}


# --- what users see ------------------------------------------------------------------

def problem(env, now=None):
    """Why the environment's archiving is failing, or None."""
    report, now = env.wal_report or {}, now or clock.now()
    if env.wal_reported_at is None:
        return None  # not deployed with archiving yet
    silent = (now - env.wal_reported_at).total_seconds()
    if silent > ALERT_AFTER:
        return f"the server's agent has not reported the WAL archiving for {int(silent)} s"
    if report.get("error"):
        return f"uploading WAL failed: {report['error']}"
    if env.wal_gap and not _backup_since(env, env.wal_gap_at):
        return (f"WAL files {env.wal_gap} are missing from the archive: no moment after "
                "them can be recovered until the next backup")
    archiver = report.get("archiver") or {}
    if archiver.get("last_failed_at") and (archiver.get("last_archived_at") or "") < \
            archiver["last_failed_at"]:
        return (f"PostgreSQL's archive_command failed on {archiver.get('last_failed_wal')} "
                f"({archiver.get('failed_count')} failures)")
    waited = lag_seconds(env, now)
    if waited > ALERT_AFTER:
        return f"a finished WAL file has waited {int(waited)} s to be uploaded"
    return None


def _backup_since(env, when):
    """A completed backup begun after `when` (its base starts a whole archive)."""
    return Backup.select().where(Backup.environment == env.id, Backup.created_at > when,
                                 Backup.deleted_at.is_null(),
                                 Backup.status == states.BackupStatus.COMPLETED).exists()


def lag_seconds(env, now=None):
    """How long the oldest finished WAL file not yet stored has waited (0: none)."""
    oldest = _parsed((env.wal_report or {}).get("oldest_pending_at"))
    return max(0, int(((now or clock.now()) - oldest).total_seconds())) if oldest else 0


def describe(env, now=None):
    now = now or clock.now()
    files = WalFile.select().where(WalFile.environment == env.id, WalFile.path.is_null(),
                                   WalFile.stored_at.is_null(False))
    count, size = files.select(fn.COUNT(WalFile.id), fn.SUM(WalFile.size)).scalar(as_tuple=True)
    newest = files.order_by(WalFile.stored_at.desc(), WalFile.name.desc()).first()
    oldest = files.order_by(WalFile.stored_at).first()
    report = env.wal_report or {}
    trouble = problem(env, now)
    status = ("off" if not enabled(env) else "starting" if env.wal_reported_at is None
              else "failing" if trouble else "archiving")
    return {"environment_id": env.id, "enabled": enabled(env), "status": status,
            "error_message": trouble, "archive_timeout_seconds": wal.ARCHIVE_TIMEOUT,
            "files": count or 0, "bytes": int(size or 0),
            "oldest_stored_at": oldest and oldest.stored_at,
            "newest_file": newest and newest.name.partition("/")[2].rsplit(".", 1)[0],
            "newest_stored_at": newest and newest.stored_at,
            "pending": int(report.get("pending") or 0), "lag_seconds": lag_seconds(env, now),
            "reported_at": env.wal_reported_at, "alerted_at": env.wal_alerted_at}


def get(actor, env_id):
    env = access.environment(actor, env_id)
    return {**describe(env), **pitr.window_fields(env.id)}


# --- scheduler jobs ------------------------------------------------------------------

def watch():
    """One `backup.archiving_failed` as an environment's archiving starts failing,
    one `backup.archiving_recovered` as it works again (conditional updates: several
    schedulers send each once). Returns how many events went out."""
    now, sent = clock.now(), 0
    watched = Environment.select().where(Environment.wal_reported_at.is_null(False),
                                         Environment.is_active == True)  # noqa: E712
    for env in watched:
        trouble = problem(env, now) if enabled(env) else None
        if bool(trouble) == (env.wal_alerted_at is not None):
            continue
        with database.atomic():
            done = Environment.update(wal_alerted_at=now if trouble else None).where(
                Environment.id == env.id, Environment.wal_alerted_at == env.wal_alerted_at
                if env.wal_alerted_at else Environment.wal_alerted_at.is_null()).execute()
            if done:
                events.record_archiving(env, env.project.organization_id, trouble)
                sent += 1
    return sent


def sweep(berth):
    """Each environment's WAL behind its base (`base_of`) removed from storage (an
    environment keeping no backup keeps its WAL, unless it is destroyed or deleted:
    then it all goes), and uploads never completed dropped. Returns how many files
    went."""
    store, removed = None, 0
    for env in Environment.select().where(
            Environment.id.in_(WalFile.select(WalFile.environment).distinct())):
        base = base_of(env)
        if base is None and env.is_active:
            continue  # a base may yet come
        behind = WalFile.environment == env.id
        if base is not None:
            behind &= WalFile.stored_at < base.created_at
        for row in WalFile.select().where(behind):
            store = store or stores.for_settings(berth.settings)
            removed += _remove(store, row)
    stale = WalFile.select().where(WalFile.stored_at.is_null(),
                                   WalFile.created_at < clock.now() - ABANDONED)
    for row in stale:
        store = store or stores.for_settings(berth.settings)
        removed += _remove(store, row)
    return removed


def base_of(env, now=None):
    """The backup the archive's window starts from: the newest kept backup taken
    at or before the window's start (`keep_daily` days back, as the policy keeps
    daily copies), else the oldest kept one. WAL written before it serves no
    point in the window; None: no backup is kept."""
    window_start = (now or clock.now()) - dt.timedelta(days=env.backup_keep_daily or 0)
    kept = Backup.select().where(Backup.environment == env.id, Backup.deleted_at.is_null(),
                                 Backup.status == states.BackupStatus.COMPLETED)
    return (kept.where(Backup.created_at <= window_start).order_by(Backup.created_at.desc())
            .first() or kept.order_by(Backup.created_at).first())


def _remove(store, row):
    try:
        if row.upload_id:
            store.abort_upload(row.key, row.upload_id)
        if row.stored_at is not None:
            store.delete_prefix(row.key)
    except Exception as exc:  # storage unreachable: the next sweep tries again
        log.warning("removing WAL file %s failed: %s", row.key, exc)
        return 0
    return WalFile.delete().where(WalFile.id == row.id).execute()


def _parsed(value):
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)
    except (AttributeError, ValueError):
        return None
