"""What a backup or restore task (lifecycle.KINDS `backup`, `restore`) does to
its Backup rows: a backup task's row is its backup; a restore task's row is its
safety backup (taken first, put back if the restore fails). Each row follows
its task: `running` when the agent acknowledges it, then `completed` (only when
the agent verified the stored objects), `failed` with the reason, or
`cancelled`. Their events are `backup.*` and `restore.*`, never `deploy.*`.

Called by lifecycle inside the transaction that settles the task; imports
models, states and events only (services/backups starts these tasks)."""

from control_plane import events, states
from control_plane.models import Backup

B = states.BackupStatus
RESULT_SIZES = ("database_size", "filestore_size", "total_size", "compressed_size")


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
    `safety` of a restore's (which may have completed though the restore failed)."""
    result = outcome.result or {}
    return result if d.kind == "backup" else (result.get("safety") or {})


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
        if result.get("verified") is True and (outcome.ok or d.kind == "restore"):
            if _move(backup, B.COMPLETED, **timing, **_completed_fields(backup, result, now)):
                if d.kind == "backup":
                    events.record_backup_finished(backup, d.project_id, org_id, True)
            continue
        reason = outcome.error or (f"the {d.kind} failed" if not outcome.ok
                                   else "the safety backup was not verified")
        # Its open multipart uploads stay listed for transfers.abort_unfinished.
        if _move(backup, B.FAILED, error_message=reason[:2000], **timing):
            if d.kind == "backup":
                events.record_backup_finished(backup, d.project_id, org_id, False)
    if d.kind == "restore" and outcome.status != states.DeploymentStatus.CANCELLED:
        events.record_restore_finished(d, org_id, outcome.ok, outcome.error)
