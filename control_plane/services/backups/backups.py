"""Backups of an environment (database dump, filestore archive, manifest) and
restores into one, both as tasks (kinds `backup` and `restore`, registered with
their hooks in tasks.py), on the public API, /api/v1 and for operators.

A backup or restore needs a status the lifecycle allows it from (409
environment_not_ready) and no task pending or running (409 task_in_progress, on
every surface: it is a task, not a deployment). A restore
takes a safety backup first (a `manual` Backup of the restored environment,
its notes naming the restore, its `source_backup` the backup restored) and
puts it back if the restore fails. The agent reads and writes the objects
through the transfer API (transfers.py); the control plane names every key."""

import datetime as dt
import uuid

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.infra.pagination import page_page
from control_plane.models import Backup, Environment, Project
from control_plane.services import audit
from control_plane.services.backups import neutralize as neutralization
from control_plane.services.backups import objects, pitr, stores
from control_plane.services.backups.kinds import (
    EXPORT_OBJECT,
    IMPORT_OBJECT,
    OBJECTS,
    require_ready,
)
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors, states
from protocol import filestore_objects as fo
from protocol import wal
from protocol.kinds import TaskKind

B = states.BackupStatus
# Every object name the transfer API accepts (the agent falls back to gzip without zstd;
# an export adds Odoo's zip; an import's one object is read, never written, by the agent).
ALLOWED_OBJECTS = OBJECTS + ("filestore.tar.gz", fo.MAP_OBJECT, wal.BASE_OBJECT, EXPORT_OBJECT,
                             IMPORT_OBJECT)


# --- starting ---------------------------------------------------------------

def create(env, *, actor, berth, backup_type=states.BackupType.MANUAL,
           notes=None, conflict=errors.TaskInProgress, trigger=None):
    """Inside the caller's transaction, `env` locked: the backup (`pending`), its
    task and the agent's command. Returns the Backup."""
    require_ready(env, TaskKind.BACKUP, conflict)
    backup_id = uuid.uuid4()
    # The policy's backups are the spec's `scheduled` trigger; the others are asked
    # for, unless the caller says (an automation rule's).
    trigger = trigger or (states.Trigger.SCHEDULED if backup_type == states.BackupType.SCHEDULED
                          else states.Trigger.MANUAL)
    engine.start(env, TaskKind.BACKUP, berth=berth, actor=actor,
                 trigger=trigger, record={"extra_data": {"backup_id": str(backup_id)}},
                backup_type=backup_type, notes=notes)
    return Backup.get_by_id(backup_id)


def restore(env, source_id, *, actor, berth, neutralize=None, profile=None, anonymize=None,
            trigger=states.Trigger.MANUAL, target_time=None, source_environment_id=None):
    """Inside the caller's transaction, `env` locked: a `restore` task of a
    completed backup of an environment of the same project (404 otherwise, 400
    unless completed), or with `target_time` of the source environment (this one
    unless `source_environment_id`) at that moment (pitr.py), with its safety
    backup; neutralised (by `profile`, and anonymised if asked) unless into
    production or `neutralize` is False (neutralize.py). Returns the task."""
    moment = None
    if target_time is not None:
        require_ready(env, TaskKind.RESTORE)
        source_env = pitr.source_environment(env, source_environment_id)
        target_time = pitr.parse_target(target_time)
        source_id = pitr.check(env, source_env, target_time).id
        moment = {"target_time": target_time.isoformat(), "source_environment_id":
                  str(source_env.id)}
    source = Backup.get_or_none(Backup.id == source_id, Backup.deleted_at.is_null())
    source_env = source and Environment.get_or_none(Environment.id == source.environment_id)
    if source_env is None or source_env.project_id != env.project_id:
        raise errors.NotFound("Backup not found in this environment's project.")
    if source.status != B.COMPLETED:
        raise errors.BackupNotCompleted(
            f"Only a completed backup can be restored; this one is {source.status}.")
    require_ready(env, TaskKind.RESTORE)
    objects.require_reader(env, source)
    wanted = neutralization.decide(env, neutralize, profile, anonymize)
    d = engine.start(env, TaskKind.RESTORE, berth=berth, trigger=trigger,
                     actor=actor, source=source, record={"extra_data": {
                         "backup_id": str(source.id), "safety_backup_id": str(uuid.uuid4()),
                         **({"point_in_time": moment} if moment else {}), **wanted}})
    neutralization.record(d, env, neutralize, actor.label)
    return d


# --- reading ----------------------------------------------------------------

def newest_completed(env_id):
    """The id of the environment's newest completed backup; 409
    `no_completed_backup` if none."""
    backup = (Backup.select(Backup.id).where(
        Backup.environment == env_id, Backup.status == B.COMPLETED,
        Backup.deleted_at.is_null()).order_by(Backup.created_at.desc()).first())
    if backup is None:
        raise errors.NoCompletedBackup("The source environment has no completed backup.")
    return backup.id


def page(env, *, status=None, backup_type=None, page=1, page_size=20):
    """The environment's backups, newest first (page pagination); deleted ones
    (retention removed their objects) are not listed."""
    query = Backup.select().where(Backup.environment == env.id, Backup.deleted_at.is_null())
    if status:
        query = query.where(Backup.status == status)
    if backup_type:
        query = query.where(Backup.backup_type == backup_type)
    return page_page(query.order_by(Backup.created_at.desc(), Backup.id.desc()),
                     page=page, page_size=page_size)


def get_backup(actor, backup_id):
    """A listed backup of an environment the actor sees (404 otherwise)."""
    backup = Backup.get_or_none(Backup.id == backup_id, Backup.deleted_at.is_null())
    try:
        if backup is None:
            raise errors.NotFound()
        access.environment(actor, backup.environment_id)
    except errors.NotFound:
        raise errors.NotFound("Backup not found.") from None
    return backup


def backup_org(backup):
    return (Project.select(Project.organization).join(Environment)
            .where(Environment.id == backup.environment_id).scalar())


def filestore_object(backup):
    return next((name for name in backup.parts or {} if name.startswith("filestore.")),
                "filestore.tar.zst")


def download_urls(backup, settings, expires_in=3600):
    """URLs for a plain GET of the database dump, the filestore archive and the
    manifest, valid `expires_in` seconds (400 unless completed)."""
    if backup.status != B.COMPLETED:
        raise errors.BackupNotCompleted(
            f"Only a completed backup can be downloaded; this one is {backup.status}.")
    store = stores.for_settings(settings)
    stem = f"backup-{backup.id}"

    def url(name):
        return store.get_url(backup.storage_prefix + name, expires=expires_in,
                             filename=f"{stem}-{name}")

    filestore_url = (objects.archive_url(backup, settings, expires_in, f"{stem}-filestore.tar")
                     if objects.is_objects(backup) else url(filestore_object(backup)))
    return {"backup_id": backup.id, "database_url": url("database.dump"),
            "filestore_url": filestore_url, "manifest_url": url("manifest.json"),
            "expires_in": expires_in,
            "expires_at": clock.now() + dt.timedelta(seconds=expires_in),
            "use_streaming": bool(store.streaming)}


# --- what people ask ----------------------------------------------------------------

DEPLOY = "project.environments.deploy"  # /api/v1 and the console: taking and restoring backups


def list_backups(actor, env_id, **filters):
    """Any member of the environment's organization, any key in its scope, reads its
    backups."""
    return page(access.environment(actor, env_id), **filters)


def download(actor, backup_id, berth, expires_in=3600):
    backup = get_backup(actor, backup_id)
    urls = download_urls(backup, berth.settings, expires_in)  # refused: no event
    audit.record(backup_org(backup), "backup.download", "backup", backup.id,
                 {"environment_id": backup.environment_id, "expires_in": expires_in})
    return urls


def take(actor, env_id, *, berth, backup_type="manual", comment=None):
    """A manual backup of the environment (permission `project.environments.deploy`)."""
    with database.atomic():
        env = access.environment(actor, env_id, DEPLOY, lock=True)
        return create(env, actor=actor, berth=berth, backup_type=backup_type, notes=comment)


def restore_into(actor, env_id, backup_id, *, berth, neutralize=None, profile=None,
                 anonymize=None, target_time=None, source_environment_id=None):
    """A restore of a backup of the project, or of an environment of it at a point in
    time, into the environment."""
    with database.atomic():
        env = access.environment(actor, env_id, DEPLOY, lock=True)
        return restore(env, backup_id, actor=actor, berth=berth, neutralize=neutralize,
                       profile=profile, anonymize=anonymize, target_time=target_time,
                       source_environment_id=source_environment_id)

