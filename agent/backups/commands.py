"""The backup commands: backup (also a deploy's pre-deploy backup, through the
registry), restore (of a backup, or of an import in Odoo's format), export (a
backup written as Odoo's zip) and drill (a backup restored into a throwaway copy
and checked). While one runs, `berth-agent status` shows its progress (the
status file)."""

import contextlib

from agent.commands import handles
from agent.mail import erp_settings
from agent.status import now_iso
from protocol.kinds import CommandKind


@contextlib.contextmanager
def _backups(agent, payload, kind, key):
    """The environment's Backups, its progress shown by `berth-agent status`
    (the status file) while the command runs."""
    from agent.backups.backups import Backups
    from agent.deploy.environments import Environments

    status = getattr(agent, "status", None)

    def progress(**fields):
        if status is not None:
            status.operation(key, **fields)

    progress(kind=kind, environment_id=payload["environment_id"],
             backup_id=payload.get("backup_id"), started_at=now_iso(), phase="starting",
             bytes_done=0)
    envs = Environments(agent.docker(), health_timeout=int(payload.get("health_timeout") or 120))
    try:
        yield Backups(envs, agent.config.credential, progress)
    finally:
        if status is not None:
            status.end_operation(key)


@handles(CommandKind.BACKUP)
def backup(agent, payload, log, label="backup"):
    with _backups(agent, payload, CommandKind.BACKUP, f"backup {payload['backup_id']}") as backups:
        return backups.backup(payload, log, label=label)


@handles(CommandKind.RESTORE)
def restore(agent, payload, log, revert_to=None):
    """A restore; or, from a deploy whose module update failed (`revert_to`: its
    pre-deploy backup's result, `payload` that backup's command), its database
    alone put back."""
    if revert_to is not None:
        key = f"revert of {payload['environment_id']} to {payload['backup_id']}"
        with _backups(agent, payload, CommandKind.RESTORE, key) as backups:
            return backups.put_back(payload, revert_to, log)
    source = (f"import {payload['import'].get('import_id')}" if payload.get("import")
              else payload["backup_id"])
    key = f"restore {source} into {payload['environment_id']}"
    if payload.get("neutralize"):  # a copy: its mail goes to the catcher, once made safe
        payload = {**payload, "mail": erp_settings(agent, payload["environment_id"])}
    with _backups(agent, payload, CommandKind.RESTORE, key) as backups:
        return backups.restore(payload, log)


@handles(CommandKind.EXPORT)
def export(agent, payload, log):
    """A completed backup written as Odoo's backup zip (agent/backups/odoo_transfer.py)."""
    from agent.backups import odoo_transfer

    with _backups(agent, payload, CommandKind.EXPORT, f"export {payload['backup_id']}") as backups:
        return odoo_transfer.export(backups, payload, log)


@handles(CommandKind.DRILL)
def drill(agent, payload, log):
    """A backup restored into a throwaway copy, checked, removed (agent/backups/drills.py)."""
    from agent.backups import drills

    with _backups(agent, payload, CommandKind.DRILL, f"drill {payload['backup_id']}") as backups:
        return drills.drill(backups, payload, log)
