"""The agents' side of backup objects: upload URLs (multipart, begun lazily,
one upload per object), completing an upload (the object read back from
storage and checked against the agent's size and SHA-256), and download URLs (to verify a
backup, or to restore one). The agent is its server's credential; it reaches
only backups of environments on its server, and the backup a restore running
on its server reads. Object names come from a fixed list; the control plane
makes every storage key (`Backup.storage_prefix` + name)."""

import logging

from control_plane import storage
from control_plane.infra.db import database, for_update
from control_plane.models import Backup, Deployment, Environment
from control_plane.services.backups import objects, odoo, stores
from control_plane.services.backups.backups import ALLOWED_OBJECTS
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors, states
from protocol import filestore_objects as fo

log = logging.getLogger("berth.backups")
URL_SECONDS = 3600
MAX_PARTS = 10_000  # S3's limit


def known_name(name):
    return name in ALLOWED_OBJECTS or fo.is_pack(name)


def check_object(name, writing=False):
    if not known_name(name):
        raise errors.Unprocessable(f"Unknown backup object; one of: {', '.join(ALLOWED_OBJECTS)}"
                                   ", or packs/<uuid>.tar.zst.")
    if writing and name == odoo.IMPORT_OBJECT:
        raise errors.Unprocessable("An import is uploaded by its user, not by an agent.")
    return name


def _on_server(env_id, server):
    return Environment.select().where(Environment.id == env_id,
                                      Environment.server == server.id).exists()


def reading_on(env_id, server):
    """A restore pending or running on the server reads backups of this environment
    (a point-in-time restore reads its base backup, the maps of the backups after it
    and the environment's archived WAL)."""
    source = Backup.alias()
    return (Backup.select().join(Deployment, on=(Backup.task == Deployment.id))
            .join(Environment, on=(Deployment.environment == Environment.id))
            .join(source, on=(Backup.source_backup == source.id))
            .where(source.environment == env_id, Environment.server == server.id,
                   Deployment.status.in_(engine.ACTIVE)).exists())


def _backup(server, backup_id, *, lock=False, reading=False):
    """The backup, if the server may touch it (404 otherwise: another server's
    backups are not confirmed to exist)."""
    query = Backup.select().where(Backup.id == backup_id, Backup.deleted_at.is_null())
    backup = (for_update(query) if lock else query).first()
    if backup is None or not (_on_server(backup.environment_id, server)
                              or (reading and reading_on(backup.environment_id, server))):
        raise errors.NotFound("Backup not found.")
    return backup


def _open(backup, name):
    if name == odoo.EXPORT_OBJECT:  # written into a completed backup by its export task
        if odoo.export_task(backup) is None:
            raise errors.TransferClosed("No export of this backup is running.")
        return
    if backup.status not in states.BACKUP_IN_PROGRESS:
        raise errors.TransferClosed(f"The backup is {backup.status}; nothing more is uploaded.")


def part_url(server, backup_id, name, part_number, berth):
    """`{url}` for an HTTP PUT of one part (1..10000) of an object of a backup in
    progress; the object's multipart upload begins with its first part."""
    check_object(name, writing=True)
    if not 1 <= part_number <= MAX_PARTS:
        raise errors.Unprocessable(f"part_number: 1 to {MAX_PARTS}.")
    store = stores.for_settings(berth.settings)
    key, upload_id = _recorded_upload(server, backup_id, name)
    if not upload_id:
        # Begun outside any transaction, as `complete` joins: storage slow to answer
        # must not hold the backup's row (SQLite: every writer) meanwhile.
        begun = store.begin_upload(key)
        try:
            key, upload_id = _recorded_upload(server, backup_id, name, begun=begun)
        except errors.ApiError:  # the backup ended meanwhile
            _abort_unused(store, key, begun, backup_id)
            raise
        if upload_id != begun:  # another part's request began one first: that one is used
            _abort_unused(store, key, begun, backup_id)
    return {"url": store.part_url(key, upload_id, part_number, expires=URL_SECONDS)}


def _abort_unused(store, key, upload_id, backup_id):
    try:
        store.abort_upload(key, upload_id)
    except Exception as exc:  # an ended backup's sweep aborts what is left under its prefix
        log.warning("aborting an unused upload of backup %s failed: %s", backup_id, exc)


def _recorded_upload(server, backup_id, name, begun=None):
    """(key, upload id) of the object's multipart upload, the backup still open;
    with `begun`, that upload recorded unless another one was first."""
    with database.atomic():
        backup = _backup(server, backup_id, lock=True)
        _open(backup, name)
        upload_id = (backup.uploads or {}).get(name)
        if not upload_id and fo.is_pack(name) and objects.recorded(backup, name):
            # Other backups of the project count on it: a pack is never written twice.
            raise errors.Conflict("This pack is stored already.")
        if not upload_id and begun:
            upload_id = begun
            Backup.update(uploads={**(backup.uploads or {}), name: begun}).where(
                Backup.id == backup.id).execute()
        return storage_key(backup, name), upload_id


def storage_key(backup, name):
    """Where storage keeps a backup's object: a pack under its project, the rest
    under the backup's prefix."""
    if fo.is_pack(name):
        return objects.pack_key(objects.project_of(backup), name)
    return backup.storage_prefix + name


def complete(server, backup_id, name, parts, size, sha256, berth):
    """The object's parts joined (ascending part numbers, as the agent's PUTs
    answered them), then the whole object read back from storage and hashed
    here: only an object whose size and SHA-256 match what the agent sent is
    recorded in `Backup.parts`. Returns `{size, sha256}` as read back."""
    check_object(name, writing=True)
    store = stores.for_settings(berth.settings)
    key, upload_id = _recorded_upload(server, backup_id, name)
    if upload_id is None:
        raise errors.Conflict("No upload of this object was begun (ask for a part URL).")
    # Outside any transaction, like the read-back: storage may take minutes to join a
    # large object, and the backup's row lock (SQLite's write lock: every writer's)
    # would hold up the other object's parts meanwhile. A race with another complete
    # or an abort of this upload is the store's to refuse.
    store.complete_upload(key, upload_id, sorted((p["part_number"], p["etag"]) for p in parts))
    with database.atomic():
        backup = _backup(server, backup_id, lock=True)
        uploads = dict(backup.uploads or {})
        if uploads.get(name) == upload_id:  # no longer open in storage
            del uploads[name]
            Backup.update(uploads=uploads).where(Backup.id == backup.id).execute()
    members = None
    if fo.is_pack(name):  # every object in it hashed against its name, too
        stored, members = objects.read_back(store, key, name)
    else:
        stored = storage.read_back(store, key)
    if stored != {"size": size, "sha256": sha256}:
        raise errors.Unprocessable(
            f"{name} in storage does not match what was sent: {stored['size']} bytes, sha256 "
            f"{stored['sha256']}; sent {size} bytes, sha256 {sha256}.")
    with database.atomic():
        backup = _backup(server, backup_id, lock=True)
        _open(backup, name)
        if members is not None:  # the project's, not the backup's
            objects.record(backup, name, key, stored, members)
        else:
            Backup.update(parts={**(backup.parts or {}), name: stored}).where(
                Backup.id == backup.id).execute()
    return stored


def download_url(server, backup_id, name, berth):
    """`{url}` for a GET (Range allowed) of an uploaded object of the backup."""
    check_object(name)
    if name == odoo.IMPORT_OBJECT:  # `backup_id` is an import's
        return odoo.import_download_url(server, backup_id, berth)
    backup = _backup(server, backup_id, reading=True)
    if fo.is_pack(name):
        if objects.pack(objects.project_of(backup), name) is None:
            raise errors.NotFound("The backup's project holds no such pack.")
    elif name not in (backup.parts or {}):
        raise errors.NotFound("This object of the backup was not uploaded.")
    store = stores.for_settings(berth.settings)
    return {"url": store.get_url(storage_key(backup, name), expires=URL_SECONDS)}


def known(server, backup_id, hashes):
    """{known: {sha256: pack}}: which of the filestore objects the backup's project
    holds, for the backup in progress."""
    backup = _backup(server, backup_id)
    if backup.status not in states.BACKUP_IN_PROGRESS:
        raise errors.TransferClosed(f"The backup is {backup.status}; nothing more is uploaded.")
    return objects.known(backup, hashes)


def abort_unfinished(berth):
    """The scheduler's job: the multipart uploads a backup left open when it ended
    without completing (failed, cancelled) aborted in storage (every one under its
    prefix), then taken off its row. Storage that is unreachable (often why the backup failed) keeps
    them listed for the next run. Returns how many were aborted."""
    ended = (Backup.select().where(Backup.status.not_in(states.BACKUP_IN_PROGRESS))
             .where(Backup.uploads.is_null(False), Backup.uploads != {}))
    store, aborted = None, 0
    for backup in ended:
        store = store or stores.for_settings(berth.settings)
        try:
            for name, upload_id in (backup.uploads or {}).items():
                store.abort_upload(storage_key(backup, name), upload_id)
                aborted += 1
            if backup.status != states.BackupStatus.COMPLETED:
                # Also one begun in storage whose answer was lost (its id never
                # recorded); a completed backup's prefix may hold its export's.
                aborted += store.abort_uploads(backup.storage_prefix)
        except Exception as exc:  # storage still unreachable: the next run tries again
            log.warning("aborting the uploads of backup %s failed: %s", backup.id, exc)
            continue
        # Conditional: another scheduler aborting the same uploads is harmless.
        Backup.update(uploads={}).where(Backup.id == backup.id,
                                        Backup.uploads == backup.uploads).execute()
    return aborted
