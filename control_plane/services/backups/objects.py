"""A project's filestore objects, the control plane's side of the `objects` layout
(protocol/filestore_objects.py; the agent's side: agent/backups/objects.py).

Packs are the project's, not a backup's: `objects/<project_id>/packs/<uuid>.tar.zst`
in storage, recorded as FilestorePack once the control plane has read the whole
pack back and hashed every member against its name (FilestoreObject: the
objects it found). An agent asks which objects its project holds (`known`) and
uploads only the others. A completed backup is linked to the packs its map
names (BackupPack); retention deletes a pack once no kept backup is linked to it
and no backup of its project is in progress (one may be about to name it). A
backup's filestore archive is composed from its packs on request (`compose`)."""

import contextlib
import gzip
import hashlib
import logging

import zstandard

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Backup, BackupPack, Environment, FilestoreObject, FilestorePack
from control_plane.services import agents
from control_plane.services.backups import stores
from control_plane.storage import tokens
from control_plane.vocabulary import errors, states
from protocol import filestore_objects as fo

log = logging.getLogger("berth.backups")
READ = 1024 * 1024
INSERT_BATCH = 500


def pack_key(project_id, name):
    return f"objects/{project_id}/{name}"


def project_of(backup):
    return Environment.select(Environment.project).where(
        Environment.id == backup.environment_id).scalar()


def is_objects(backup):
    fs = (backup.manifest or {}).get("filestore")
    return isinstance(fs, dict) and fs.get("layout") == fo.LAYOUT


def require_reader(env, backup):
    """A restore, export or drill of an objects-layout backup needs an agent that
    reads that layout (409 agent_upgrade_required otherwise)."""
    if is_objects(backup) and agents.env_agent_behind(env):
        raise errors.AgentUpgradeRequired(
            "This backup's filestore is kept as objects of the project; the server's "
            "agent is older than that layout. Upgrade the agent first.")


def known(backup, hashes):
    """{sha256: pack name} of the given objects the backup's project holds."""
    query = (FilestoreObject.select(FilestoreObject.sha256, FilestorePack.name)
             .join(FilestorePack)
             .where(FilestoreObject.project == project_of(backup),
                    FilestoreObject.sha256.in_(sorted(set(hashes))),
                    FilestorePack.deleted_at.is_null()))
    return {"known": {sha: name for sha, name in query.tuples()}}


def pack(project_id, name):
    return FilestorePack.get_or_none(FilestorePack.project == project_id,
                                     FilestorePack.name == name,
                                     FilestorePack.deleted_at.is_null())


def recorded(backup, name):
    """Whether the backup's project has (or had) a pack of this name."""
    return FilestorePack.select().where(FilestorePack.project == project_of(backup),
                                        FilestorePack.name == name).exists()


def read_back(store, key, name):
    """({size, sha256} of the stored pack, [(sha256, size)] of its members), every
    member hashed against its name: a pack that is not what its name says raises
    422, as an object that does not match what the agent sent does."""
    raw = fo.Hashed(store.open(key))
    members = []
    try:
        with contextlib.closing(raw), _plain(raw, name) as plain:
            for member, size, body in fo.members(plain):
                if not fo.SHA256.fullmatch(member):
                    raise fo.LayoutError(f"{member!r} is not an object")
                digest = hashlib.sha256()
                while chunk := body.read(READ):
                    digest.update(chunk)
                digest = digest.hexdigest()
                if digest != member:
                    raise fo.LayoutError(f"object {member} hashes to {digest}")
                members.append((member, size))
            while raw.read(READ):  # the whole object's SHA-256, past the tar's end
                pass
    except (fo.LayoutError, zstandard.ZstdError, OSError, EOFError) as exc:
        raise errors.Unprocessable(f"{name} is not a pack of filestore objects: {exc}") from None
    return {"size": raw.size, "sha256": raw.digest.hexdigest()}, members


def _plain(raw, name):
    if fo.compression_of(name) == "zstd":
        return zstandard.ZstdDecompressor().stream_reader(raw, read_size=READ, closefd=False)
    return gzip.GzipFile(fileobj=raw, mode="rb")


def record(backup, name, key, stored, members):
    """The pack and its objects recorded for the backup's project (once: a second
    complete of the same pack finds it)."""
    project_id = project_of(backup)
    with database.atomic():
        existing = pack(project_id, name)
        if existing is not None:
            return existing
        row = FilestorePack.create(project=project_id, name=name, key=key, backup=backup.id,
                                   size=stored["size"], sha256=stored["sha256"],
                                   objects=len(members))
        rows = [{"project": project_id, "sha256": sha, "size": size, "pack": row.id}
                for sha, size in dict(members).items()]
        for i in range(0, len(rows), INSERT_BATCH):
            FilestoreObject.insert_many(rows[i:i + INSERT_BATCH]).execute()
    return row


def unstored(backup, manifest):
    """Why an objects-layout backup cannot complete (a pack its map names is not
    recorded for its project), or None."""
    fs = (manifest or {}).get("filestore") if isinstance(manifest, dict) else None
    if not (isinstance(fs, dict) and fs.get("layout") == fo.LAYOUT):
        return None
    names = fs.get("packs")
    if not isinstance(names, list) or not all(fo.is_pack(n) for n in names):
        return "the backup's manifest lists no valid packs"
    found = {p.name for p in FilestorePack.select(FilestorePack.name).where(
        FilestorePack.project == project_of(backup), FilestorePack.name.in_(names or [""]),
        FilestorePack.deleted_at.is_null())}
    missing = sorted(set(names) - found)
    return f"{len(missing)} pack(s) of the filestore are not stored, e.g. {missing[0]}" \
        if missing else None


def link(backup):
    """A completed backup tied to the packs its map names, so retention keeps them."""
    if not is_objects(backup):
        return
    names = backup.manifest["filestore"]["packs"]
    ids = [p.id for p in FilestorePack.select(FilestorePack.id).where(
        FilestorePack.project == project_of(backup), FilestorePack.name.in_(names or [""]))]
    for pack_id in ids:
        BackupPack.insert(backup=backup.id, pack=pack_id).on_conflict_ignore().execute()


def collect(store, now=None):
    """Packs no kept backup needs deleted from storage, in projects with no backup
    in progress; returns how many. A pack a failed backup uploaded goes too."""
    busy = (Backup.select(Environment.project).join(Environment)
            .where(Backup.status.in_(states.BACKUP_IN_PROGRESS)))
    kept = (BackupPack.select(BackupPack.pack).join(Backup)
            .where(Backup.deleted_at.is_null()))
    unused = FilestorePack.select().where(FilestorePack.deleted_at.is_null(),
                                          FilestorePack.project.not_in(busy),
                                          FilestorePack.id.not_in(kept))
    deleted = 0
    for row in unused:
        try:
            store.delete_prefix(row.key)
        except Exception:  # storage unreachable: the next sweep tries again
            log.warning("deleting pack %s failed", row.key, exc_info=True)
            continue
        with database.atomic():
            FilestoreObject.delete().where(FilestoreObject.pack == row.id).execute()
            FilestorePack.update(deleted_at=now or clock.now()).where(
                FilestorePack.id == row.id).execute()
        deleted += 1
    return deleted


def archive_url(backup, settings, expires, filename):
    """A signed URL of the control plane's for a plain GET of the backup's filestore
    as one tar (composed from its packs as it is read: no Range)."""
    token = tokens.sign(settings["SECRET_KEY"], op="filestore", expires=expires,
                        key=backup.storage_prefix + fo.MAP_OBJECT, filename=filename)
    return f"{settings['PUBLIC_URL'].rstrip('/')}{tokens.PATH}filestore/{token}"


def archive(token, settings):
    """(chunks of the tar, its file name) for a signed archive_url's token."""
    claims = tokens.verify(settings["SECRET_KEY"], token, "filestore")
    prefix = claims["key"].removesuffix(fo.MAP_OBJECT)
    backup = Backup.get_or_none(Backup.storage_prefix == prefix, Backup.deleted_at.is_null())
    if backup is None or not is_objects(backup):
        raise errors.NotFound("The backup is no longer kept.")
    return compose(backup, stores.for_settings(settings)), claims.get("filename")


def compose(backup, store):
    """The backup's filestore as plain tar bytes, composed from its packs (every
    object hashed on the way: an archive cut short if one does not check)."""
    project_id = project_of(backup)
    try:
        with contextlib.closing(store.open(backup.storage_prefix + fo.MAP_OBJECT)) as body:
            entries = fo.decode_map(body.read(fo.MAP_MAX))
    except (OSError, fo.LayoutError) as exc:  # storage no longer holds what it was given
        raise errors.StorageUnavailable(
            f"The backup's filestore map cannot be read from storage: {exc}") from None

    def open_pack(name):
        row = pack(project_id, name)
        if row is None:
            raise fo.LayoutError(f"{name} is no longer stored")
        raw = store.open(row.key)
        return _Closing(_plain(raw, name), raw)

    return fo.compose(entries, open_pack)


class _Closing:
    def __init__(self, plain, raw):
        self.plain, self.raw = plain, raw

    def __enter__(self):
        return self.plain

    def __exit__(self, *exc):
        self.plain.close()
        self.raw.close()
