"""The backup domain's tasks: `backup`, `restore` and `export`, registered here
with their commands and hooks, and the `pre_deploy` backup a deploy takes first
(its hooks are called by the deploy kinds, services/deploys/kinds.py).

A backup task's row is its Backup; a restore task's row is its safety backup
(taken first, put back if the restore fails); a deploy's is its pre-deploy
backup. Each row follows its task: `running` when the agent acknowledges it,
then `completed` (only when the agent verified the stored objects), `failed`
with the reason, or `cancelled`. Their events are `backup.*` and `restore.*`,
never `deploy.*`. An export keeps no row: its object, `odoo-export.zip`, is
recorded with the backup's others when its upload completes (transfers.py).

A backup, restore or export needs no other task pending or running and a status
the lifecycle allows it from (`require_ready`, control_plane/vocabulary/lifecycle.py): a
backup runs on a running or stopped environment, a restore or an export on a
running one; a restore shows the environment `deploying` while its ERP is stopped."""

import datetime as dt
import uuid

from control_plane import events
from control_plane.models import Backup, Deployment
from control_plane.services.backups import neutralize, objects, pitr
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import errors, states
from protocol import filestore_objects as fo
from protocol.kinds import CommandKind, TaskKind

B, D = states.BackupStatus, states.DeploymentStatus
BackupType = states.BackupType
RESULT_SIZES = ("database_size", "filestore_size", "total_size", "compressed_size")
OBJECTS = ("database.dump", "filestore.tar.zst", "manifest.json")  # what a backup uploads
EXPORT_OBJECT = "odoo-export.zip"
IMPORT_OBJECT = "upload"  # the agent's name for an import's one object
# How long a backup not taken by the schedule is kept (from its creation);
# scheduled ones follow their environment's policy (policy.py).
FIXED_RETENTION = {BackupType.MANUAL: dt.timedelta(days=30),
                   BackupType.PRE_DEPLOY: dt.timedelta(days=7)}
HEALTH_TIMEOUT = 120  # seconds the agent waits for the restored ERP's health check
TIME_LIMIT = dt.timedelta(hours=3)  # they move whole databases and filestores


def require_ready(env, kind, conflict=errors.TaskInProgress):
    """No other task, a server, and a status the lifecycle allows `kind` from
    (409 environment_not_ready otherwise)."""
    if engine.in_progress(env.id):
        raise conflict("A task is already pending or running for this environment.")
    if not env.server_id:
        raise errors.EnvironmentNotReady("The environment has no server yet.")
    engine.check_allowed(env, kind)


def transfer_url(settings, backup_id):
    return f"{settings['PUBLIC_URL'].rstrip('/')}/agent/v1/transfers/{backup_id}"


def new_backup(env, task, backup_type, notes, backup_id, source=None):
    """The `pending` row; its expiry fixed by its type (None: scheduled, set by
    its policy)."""
    backup = Backup.create(
        id=backup_id, environment=env, task=task, backup_type=backup_type, notes=notes,
        status=states.check("backup", None, B.PENDING), source_backup=source,
        storage_prefix=f"backups/{env.id}/{backup_id}/")
    if backup_type in FIXED_RETENTION:
        backup.expires_at = backup.created_at + FIXED_RETENTION[backup_type]
        Backup.update(expires_at=backup.expires_at).where(Backup.id == backup.id).execute()
    return backup


def _code_deployed():
    return (Deployment.kind.in_(kinds.names(deploys_code=True))
            & (Deployment.status == D.SUCCESS))


def deployed_code(env):
    """(git_commit, addon_commits) of the environment's last successful deploy,
    for the manifest: what the control plane recorded, not what is on disk."""
    d = (Deployment.select().where(Deployment.environment == env.id, _code_deployed())
         .order_by(Deployment.completed_at.desc(), Deployment.created_at.desc()).first())
    if d is None:
        return None, {}
    repos = (d.config or {}).get("addon_repositories") or []
    return d.git_commit, {r["name"]: r["commit"] for r in repos
                          if isinstance(r, dict) and r.get("name") and r.get("commit")}


def agent_payload(env, backup, settings):
    """The agent's `backup` command (a restore's `safety`, a deploy's `pre_backup`)."""
    git_commit, addon_commits = deployed_code(env)
    return {"environment_id": str(env.id), "backup_id": str(backup.id),
            "transfer_url": transfer_url(settings, backup.id), "objects": list(OBJECTS),
            "filestore_layout": fo.LAYOUT,
            "erp_version": env.project.effective_erp_version, "git_commit": git_commit,
            "addon_commits": addon_commits}


# --- the rows -------------------------------------------------------------------

def _rows(d):
    return list(Backup.select().where(Backup.task == d.id,
                                      Backup.status.in_(states.BACKUP_IN_PROGRESS)))


def _move(backup, target, **fields):
    """The row's move, checked against its table; False when someone else moved it."""
    fields = {"status": states.check("backup", backup.status, target), **fields}
    moved = (Backup.update(**fields)
             .where(Backup.id == backup.id, Backup.status == backup.status).execute())
    for name, value in fields.items():
        setattr(backup, name, value)
    return bool(moved)


def _rows_started(d, now):
    rows = _rows(d)
    for backup in rows:
        if backup.status == B.PENDING:
            _move(backup, B.RUNNING, started_at=now)
    return rows


def _completed_fields(backup, result, now):
    fields = {name: max(0, int(result.get(name) or 0)) for name in RESULT_SIZES}
    fields.update(is_verified=True, verified_at=now, uploads={},
                  manifest=result.get("manifest") if isinstance(result.get("manifest"), dict)
                  else backup.manifest)
    if isinstance(result.get("parts"), dict) and result["parts"]:
        fields["parts"] = result["parts"]
    return fields


def _rows_settled(d, outcome, now, result, *, own, unverified, ended=None):
    """The task ended (its agent's result, a cancel, the reaper): its rows end too.
    `result` is the agent's word on the rows' backup; `own`: the row is the task's
    whole point (a backup), so it completes only with its task, whereas a safety
    or pre-deploy backup stands though its restore or deploy failed."""
    for backup in _rows(d):
        started_at = backup.started_at or (now if outcome.result is not None else None)
        timing = {"started_at": started_at, "completed_at": now, "duration_seconds": int(
            (now - (started_at or backup.created_at)).total_seconds())}
        if outcome.status == D.CANCELLED:
            _move(backup, B.CANCELLED, **timing)
            continue
        unstored = objects.unstored(backup, result.get("manifest"))
        if result.get("verified") is True and (outcome.ok or not own) and not unstored:
            if _move(backup, B.COMPLETED, **timing, **_completed_fields(backup, result, now)):
                objects.link(backup)
                ended and ended(backup, True)
            continue
        reason = outcome.error or (f"the {d.kind} failed" if not outcome.ok else None) \
            or unstored or unverified
        # Its open multipart uploads stay listed for transfers.abort_unfinished.
        if _move(backup, B.FAILED, error_message=reason[:2000], **timing):
            ended and ended(backup, False)


# --- backup ---------------------------------------------------------------------

def _backup_payload(task, env, settings, *, backup_type=BackupType.MANUAL, notes=None):
    backup = new_backup(env, task, backup_type, notes, uuid.UUID(task.extra_data["backup_id"]))
    return agent_payload(env, backup, settings)


def _backup_started(d, org_id, now):
    for backup in _rows_started(d, now):
        events.record_backup_started(backup, d.project_id, org_id)


def _backup_refused(d, result):
    """A backup is completed only once the agent verified every stored object."""
    if result.get("verified") is not True:
        return "the backup's objects were not verified"
    return None


def _backup_settled(d, outcome, org_id, now, env_status):
    _rows_settled(d, outcome, now, outcome.result or {}, own=True,
                  unverified="the backup's objects were not verified",
                  ended=lambda backup, ok: events.record_backup_finished(
                      backup, d.project_id, org_id, ok))


# --- restore --------------------------------------------------------------------

def _restore_payload(task, env, settings, *, source=None, upload=None):
    """From a completed backup (`source`) or from an uploaded import (`upload`),
    after a safety backup of the environment."""
    moment = task.extra_data.get("point_in_time")
    what = (f"{moment['source_environment_id']} at {moment['target_time']}Z" if moment
            else f"backup {source.id}" if source is not None else f"import {upload.id}")
    safety = new_backup(env, task, BackupType.MANUAL,
                        f"Safety backup before restore {task.id} of {what}",
                        uuid.UUID(task.extra_data["safety_backup_id"]), source)
    payload = {"environment_id": str(env.id),
               "safety": agent_payload(env, safety, settings), "health_timeout": HEALTH_TIMEOUT,
               **neutralize.payload(task.extra_data)}
    if moment:
        payload["point_in_time"] = pitr.payload(
            uuid.UUID(moment["source_environment_id"]), source,
            dt.datetime.fromisoformat(moment["target_time"]), settings, transfer_url)
    if source is not None:
        payload.update(backup_id=str(source.id), transfer_url=transfer_url(settings, source.id))
    else:
        payload.update(erp_version=env.project.effective_erp_version, **{"import": {
            "import_id": str(upload.id), "object": IMPORT_OBJECT,
            "transfer_url": transfer_url(settings, upload.id)}})
    return payload


def _restore_started(d, org_id, now):
    _rows_started(d, now)
    events.record_restore_started(d, org_id)


def _restore_settled(d, outcome, org_id, now, env_status):
    _rows_settled(d, outcome, now, (outcome.result or {}).get("safety") or {}, own=False,
                  unverified="the safety backup was not verified")
    copy = neutralize.settled(d, outcome.result) if outcome.ok else None
    if outcome.status != D.CANCELLED:
        events.record_restore_finished(d, org_id, outcome.ok, outcome.error, copy=copy)


# --- export ---------------------------------------------------------------------

def _export_payload(task, env, settings, *, backup):
    return {"environment_id": str(env.id), "backup_id": str(backup.id),
            "transfer_url": transfer_url(settings, backup.id), "object": EXPORT_OBJECT,
            "erp_version": env.project.effective_erp_version}


def _export_refused(d, result):
    if result.get("object") != EXPORT_OBJECT:
        return "the export's zip was not uploaded"
    return None


# --- a deploy's pre-deploy backup (the deploy kinds' hooks call these) ------------

def has_data(env):
    """The environment's database was made: it has been deployed successfully
    and still has its database container."""
    return bool(env.db_container) and Deployment.select().where(
        Deployment.environment == env.id, _code_deployed()).exists()


def pre_deploy(env, d, settings):
    """Inside the deploy's transaction: its `pre_deploy` backup (a row of the
    deploy task) and the `pre_backup` of its command; None when there is
    nothing to back up."""
    if not has_data(env):
        return None
    backup = new_backup(env, d, BackupType.PRE_DEPLOY,
                        f"Before {d.kind} {d.id} (version {d.version})", uuid.uuid4())
    return agent_payload(env, backup, settings)


def pre_deploy_started(d, now):
    _rows_started(d, now)


def pre_deploy_settled(d, outcome, now):
    _rows_settled(d, outcome, now, (outcome.result or {}).get("pre_backup") or {}, own=False,
                  unverified="the agent reported no verified pre-deploy backup")


def _long(payload):
    return TIME_LIMIT


kinds.register(kinds.Kind(
    TaskKind.BACKUP, CommandKind.BACKUP, _backup_payload, is_deployment=False,
    failure="the backup failed", time_limit=_long, started=_backup_started,
    refused=_backup_refused, settled=_backup_settled))
kinds.register(kinds.Kind(
    TaskKind.RESTORE, CommandKind.RESTORE, _restore_payload, is_deployment=False,
    failure="the restore failed", time_limit=_long, started=_restore_started,
    settled=_restore_settled))
kinds.register(kinds.Kind(
    TaskKind.EXPORT, CommandKind.EXPORT, _export_payload, is_deployment=False,
    failure="the export failed", time_limit=_long, refused=_export_refused))
