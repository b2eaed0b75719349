"""Odoo's own backup format, both ways, on the deployment-operations surface.

Export: an `export` task (registered in tasks.py) has the agent of the backup's
environment write the completed backup as Odoo's zip, one more object of that
backup (`odoo-export.zip`, kept and removed with its others); then a signed
GET URL of it is handed out.

Import: a BackupImport row and a multipart upload under
`imports/<env_id>/<import_id>/upload`. The client asks for a URL per part
(PUT it, keep its ETag), completes the upload with the parts, and starts a
`restore` task whose source is the upload: the agent inspects it before
anything (a refused upload fails the task, environment untouched), takes a
safety backup, and restores from it. Any member with
`project.environments.deploy` does all of this: an export holds the whole
database, an import replaces it."""

import contextlib
import datetime as dt
import logging
import uuid

from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.models import Backup, BackupImport, Deployment, Environment
from control_plane.services import audit
from control_plane.services.backups import backups as bk
from control_plane.services.backups import neutralize as neutralization
from control_plane.services.backups import objects, stores
from control_plane.services.backups.kinds import EXPORT_OBJECT, IMPORT_OBJECT, require_ready
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine
from control_plane.storage import MAX_PARTS, PART_MAX  # noqa: F401  (the API names them)
from control_plane.vocabulary import errors, states
from protocol.kinds import TaskKind

log = logging.getLogger("berth.backups")

I = states.ImportStatus  # noqa: E741
D = states.DeploymentStatus
PART_MIN = 5 * 1024 * 1024  # S3's least part (but the last)
URL_SECONDS = 3600


# --- export -----------------------------------------------------------------

def _backup(actor, backup_id, *, lock=False):
    """A listed backup and its environment, the actor allowed to deploy there (404, 403)."""
    backup = Backup.get_or_none(Backup.id == backup_id, Backup.deleted_at.is_null())
    if backup is None:
        raise errors.NotFound("Backup not found.")
    try:
        env = access.environment(actor, backup.environment_id, bk.DEPLOY, lock=lock)
    except errors.NotFound:
        raise errors.NotFound("Backup not found.") from None
    return backup, env


def export_task(backup):
    """The backup's export task pending or running, if any."""
    tasks = (Deployment.select().where(Deployment.environment == backup.environment_id,
                                       Deployment.kind == TaskKind.EXPORT,
                                       Deployment.status.in_(engine.ACTIVE)))
    return next((d for d in tasks if (d.extra_data or {}).get("backup_id") == str(backup.id)),
                None)


def start_export(actor, backup_id, *, berth):
    """An `export` task of a completed backup (400 otherwise), run by the agent of
    its environment, which must be running and idle (409)."""
    with database.atomic():
        backup, env = _backup(actor, backup_id, lock=True)
        task, stale = _export(backup, env, actor, berth)
    _abort(stale, berth.settings)
    return task


def _export(backup, env, actor, berth):
    if backup.status != states.BackupStatus.COMPLETED:
        raise errors.BackupNotCompleted(
            f"Only a completed backup can be exported; this one is {backup.status}.")
    require_ready(env, TaskKind.EXPORT)
    objects.require_reader(env, backup)
    stale = _forget_stale_upload(backup)
    task = engine.start(env, TaskKind.EXPORT, berth=berth,
                        actor=actor, backup=backup,
                        record={"extra_data": {"backup_id": str(backup.id)}})
    return task, stale


def _forget_stale_upload(backup):
    """What a failed export left begun, no longer recorded: the new one starts afresh.
    Returns (key, upload id) for _abort, after the transaction, or None."""
    uploads = dict(backup.uploads or {})
    upload_id = uploads.pop(EXPORT_OBJECT, None)
    if not upload_id:
        return None
    Backup.update(uploads=uploads).where(Backup.id == backup.id).execute()
    return backup.storage_prefix + EXPORT_OBJECT, upload_id


def _abort(stale, settings):
    """The stale upload dropped in storage, outside the transaction: slow storage
    must not hold SQLite's writers. If it fails (or the process stops first), it is
    left until the backup's deletion aborts every upload under its prefix; no row
    points to what it holds."""
    if stale is not None:
        try:
            stores.for_settings(settings).abort_upload(*stale)
        except Exception as exc:  # noqa: BLE001
            log.warning("aborting the upload a failed export left in %s failed: %s",
                        stale[0], exc)


def export_url(actor, backup_id, berth, expires_in=URL_SECONDS):
    """{url, expires_at, filename, use_streaming} of the backup's Odoo zip; 409
    while an export runs, 404 `export_not_found` before one succeeded."""
    backup, env = _backup(actor, backup_id)
    url = _export_url(backup, env, berth.settings, expires_in)  # refused: no event
    audit.record(env.project.organization_id, "backup.download", "backup", backup.id,
                 {"environment_id": env.id, "format": "odoo_zip", "expires_in": expires_in})
    return url


def _export_url(backup, env, settings, expires_in):
    if export_task(backup) is not None:
        raise errors.ExportInProgress("The backup is being exported; ask again when its task "
                                      "has ended.")
    if EXPORT_OBJECT not in (backup.parts or {}):
        raise errors.ExportNotFound("This backup was not exported yet (POST to export it).")
    store = stores.for_settings(settings)
    filename = f"{env.project.name}-{env.name}-{backup.created_at:%Y%m%d-%H%M%S}.zip"
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    return {"url": store.get_url(backup.storage_prefix + EXPORT_OBJECT, expires=expires_in,
                                 filename=filename),
            "expires_at": clock.now() + dt.timedelta(seconds=expires_in),
            "filename": filename, "size": backup.parts[EXPORT_OBJECT].get("size"),
            "use_streaming": bool(store.streaming)}


# --- import -----------------------------------------------------------------

def create_import(actor, env_id, *, berth, filename=None):
    """A new import of the environment, its multipart upload begun: in storage first,
    outside the transaction (slow storage must not hold SQLite's writers), aborted if
    the import is not recorded after all."""
    env = access.environment(actor, env_id, bk.DEPLOY)
    import_id = uuid.uuid4()
    key = f"imports/{env.id}/{import_id}/{IMPORT_OBJECT}"
    store = stores.for_settings(berth.settings)
    upload_id = store.begin_upload(key)
    try:
        with database.atomic():
            env = access.environment(actor, env_id, bk.DEPLOY)
            audit.record(env.project.organization_id, "import.create", "environment", env.id,
                         {"import_id": import_id, "filename": filename})
            return BackupImport.create(id=import_id, environment=env, filename=filename,
                                       storage_key=key, upload_id=upload_id,
                                       created_by=actor.user_id)
    except Exception:
        with contextlib.suppress(Exception):  # nothing would ever point to it
            store.abort_upload(key, upload_id)
        raise


def _import(actor, env_id, import_id, *, lock=False):
    env = access.environment(actor, env_id, bk.DEPLOY, lock=lock)
    query = BackupImport.select().where(BackupImport.id == import_id,
                                        BackupImport.environment == env.id)
    imp = (for_update(query) if lock else query).first()
    if imp is None:
        raise errors.NotFound("Import not found.")
    return imp, env


def _uploading(imp):
    if imp.status != I.UPLOADING:
        raise errors.ImportUploaded("The import's upload is complete; nothing more is uploaded.")


def part_url(actor, env_id, import_id, part_number, *, berth):
    """{url, expires_at} for an HTTP PUT of one part (at most PART_MAX bytes; all
    but the last at least PART_MIN); its answer's ETag goes to `complete`."""
    imp, _ = _import(actor, env_id, import_id)
    _uploading(imp)
    url = stores.for_settings(berth.settings).part_url(imp.storage_key, imp.upload_id, part_number,
                                                 expires=URL_SECONDS)
    return {"part_number": part_number, "url": url,
            "expires_at": clock.now() + dt.timedelta(seconds=URL_SECONDS)}


def complete_import(actor, env_id, import_id, parts, *, berth):
    """The parts joined into the stored upload (ascending part numbers). The join runs
    outside any transaction (a large zip takes storage a while; transfers.complete
    says why): the import is checked before it and recorded after it."""
    store = stores.for_settings(berth.settings)
    with database.atomic():
        imp, _ = _import(actor, env_id, import_id, lock=True)
        _uploading(imp)
        key = imp.storage_key
    store.complete_upload(key, imp.upload_id, sorted((p["part_number"], p["etag"]) for p in parts))
    size = store.size(key) or 0
    with database.atomic():
        imp, env = _import(actor, env_id, import_id, lock=True)
        _uploading(imp)  # another complete of it got there first
        if not size:
            raise errors.Unprocessable("The uploaded file is empty.")
        imp.status, imp.size, imp.upload_id, imp.uploaded_at = (
            I.UPLOADED, size, None, clock.now())
        imp.save()
        audit.record(env.project.organization_id, "import.complete", "environment", env_id,
                     {"import_id": imp.id, "size": size})
        return imp


def restore_import(actor, env_id, import_id, *, berth, neutralize=None, profile=None,
                   anonymize=None):
    """A `restore` task from the upload (409 `import_not_uploaded` before it is
    complete), with its safety backup; neutralised as a backup's restore is."""
    with database.atomic():
        imp, env = _import(actor, env_id, import_id, lock=True)
        if imp.status == I.UPLOADING:
            raise errors.ImportNotUploaded("Complete the import's upload first.")
        require_ready(env, TaskKind.RESTORE)
        wanted = neutralization.decide(env, neutralize, profile, anonymize)
        d = engine.start(env, TaskKind.RESTORE, berth=berth,
                         actor=actor, upload=imp, record={"extra_data": {
                             "import_id": str(imp.id), "safety_backup_id": str(uuid.uuid4()),
                             **wanted}})
        neutralization.record(d, env, neutralize, actor.label)
        BackupImport.update(task=d.id).where(BackupImport.id == imp.id).execute()
        imp.task = d.id
        return d


def get_import(actor, env_id, import_id):
    return _import(actor, env_id, import_id)[0]


def import_status(imp):
    """`uploading`, `uploaded`, then what its newest restore task says."""
    if imp.status == I.UPLOADING or imp.task_id is None:
        return imp.status
    task = Deployment.get_or_none(Deployment.id == imp.task_id)
    if task is None or task.status in engine.ACTIVE:
        return I.RESTORING
    return I.RESTORED if task.status == D.SUCCESS else I.FAILED


# --- the agent's read of an import -------------------------------------------

def import_download_url(server, import_id, berth):
    """`{url}` of an uploaded import of an environment on the agent's server."""
    imp = (BackupImport.select().join(Environment)
           .where(BackupImport.id == import_id, Environment.server == server.id).first())
    if imp is None or imp.status == I.UPLOADING:
        raise errors.NotFound("Import not found.")
    return {"url": stores.for_settings(berth.settings).get_url(imp.storage_key, expires=URL_SECONDS)}
