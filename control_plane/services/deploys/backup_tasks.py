"""What a backup or restore task (lifecycle.KINDS `backup`, `restore`) does to
its Backup rows: a backup task's row is its backup; a restore task's row is its
safety backup (taken first, put back if the restore fails). Each row follows
its task: `running` when the agent acknowledges it, then `completed` (only when
the agent verified the stored objects), `failed` with the reason, or
`cancelled`. Their events are `backup.*` and `restore.*`, never `deploy.*`.

A deploy or redeploy (a rollback too) of an environment whose database has
data carries a `pre_deploy` backup (`pre_backup` in its command and result):
the agent takes it before touching anything and fails the deploy if it fails;
its row settles here with the deploy, like a restore's safety backup.

Called by lifecycle inside the transaction that settles the task; imports
models, states and events only (services/backups starts these tasks)."""

import datetime as dt
import uuid

from control_plane import events, states
from control_plane.models import Backup, Deployment

B = states.BackupStatus
RESULT_SIZES = ("database_size", "filestore_size", "total_size", "compressed_size")
OBJECTS = ("database.dump", "filestore.tar.zst", "manifest.json")  # what a backup uploads
# How long a backup not taken by the schedule is kept (from its creation);
# scheduled ones follow their environment's policy (services/backups/policy.py).
FIXED_RETENTION = {"manual": dt.timedelta(days=30), "pre_deploy": dt.timedelta(days=7)}
DEPLOY_KINDS = ("deploy", "redeploy")  # the kinds that take a pre_deploy backup


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


def deployed_code(env):
    """(git_commit, addon_commits) of the environment's last successful deploy,
    for the manifest: what the control plane recorded, not what is on disk."""
    d = (Deployment.select().where(Deployment.environment == env.id,
                                   Deployment.kind.in_(DEPLOY_KINDS),
                                   Deployment.status == states.DeploymentStatus.SUCCESS)
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
            "erp_version": env.project.erp_version or "17.0", "git_commit": git_commit,
            "addon_commits": addon_commits}


def has_data(env):
    """The environment's database was made: it has been deployed successfully
    and still has its database container."""
    return bool(env.db_container) and Deployment.select().where(
        Deployment.environment == env.id, Deployment.kind.in_(DEPLOY_KINDS),
        Deployment.status == states.DeploymentStatus.SUCCESS).exists()


def pre_deploy(env, d, settings):
    """Inside the deploy's transaction: its `pre_deploy` backup (a row of the
    deploy task) and the `pre_backup` of its command; None when there is
    nothing to back up."""
    if d.kind not in DEPLOY_KINDS or not has_data(env):
        return None
    backup = new_backup(env, d, "pre_deploy", f"Before {d.kind} {d.id} (version {d.version})",
                        uuid.uuid4())
    return agent_payload(env, backup, settings)


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


def started(d, org_id, now):
    for backup in _rows(d):
        if backup.status == B.PENDING:
            _move(backup, B.RUNNING, started_at=now)
        if d.kind == "backup":
            events.record_backup_started(backup, d.project_id, org_id)
    if d.kind == "restore":
        events.record_restore_started(d, org_id)


def refused(d, result):
    """Why a task the agent reports as done is a failure: a backup is completed
    only once the agent verified every stored object."""
    if d.kind == "backup" and result.get("verified") is not True:
        return "the backup's objects were not verified"
    return None


def _backup_result(d, outcome):
    """The agent's result for the task's backup: the whole result of a backup,
    `safety` of a restore's and `pre_backup` of a deploy's (which may have
    completed though the restore or deploy failed)."""
    result = outcome.result or {}
    if d.kind == "backup":
        return result
    return result.get("safety" if d.kind == "restore" else "pre_backup") or {}


def _completed_fields(backup, result, now):
    fields = {name: max(0, int(result.get(name) or 0)) for name in RESULT_SIZES}
    fields.update(is_verified=True, verified_at=now, uploads={},
                  manifest=result.get("manifest") if isinstance(result.get("manifest"), dict)
                  else backup.manifest)
    if isinstance(result.get("parts"), dict) and result["parts"]:
        fields["parts"] = result["parts"]
    return fields


def settled(d, outcome, org_id, now):
    """The task ended (its agent's result, a cancel, the reaper): its rows end too."""
    result = _backup_result(d, outcome)
    for backup in _rows(d):
        started_at = backup.started_at or (now if outcome.result is not None else None)
        timing = {"started_at": started_at, "completed_at": now, "duration_seconds": int(
            (now - (started_at or backup.created_at)).total_seconds())}
        if outcome.status == states.DeploymentStatus.CANCELLED:
            _move(backup, B.CANCELLED, **timing)
            continue
        if result.get("verified") is True and (outcome.ok or d.kind != "backup"):
            if _move(backup, B.COMPLETED, **timing, **_completed_fields(backup, result, now)):
                if d.kind == "backup":
                    events.record_backup_finished(backup, d.project_id, org_id, True)
            continue
        reason = outcome.error or (f"the {d.kind} failed" if not outcome.ok
                                   else "the safety backup was not verified"
                                   if d.kind == "restore"
                                   else "the agent reported no verified pre-deploy backup")
        # Its open multipart uploads stay listed for transfers.abort_unfinished.
        if _move(backup, B.FAILED, error_message=reason[:2000], **timing):
            if d.kind == "backup":
                events.record_backup_finished(backup, d.project_id, org_id, False)
    if d.kind == "restore" and outcome.status != states.DeploymentStatus.CANCELLED:
        events.record_restore_finished(d, org_id, outcome.ok, outcome.error)
