"""`berth admin backup ...`: an environment's backups for operators (list, create,
restore, and Odoo's zip: export, export-url)."""

import click

from control_plane.agent_link import current_berth
from control_plane.cli.admin import UUID_T, _iso, admin, command, operator
from control_plane.vocabulary import states

FIELDS = ("backup_type", "status", "database_size", "filestore_size", "total_size",
          "compressed_size", "duration_seconds", "is_verified", "notes", "error_message")
TIMES = ("created_at", "started_at", "completed_at", "verified_at", "expires_at")


def _backup(b):
    return {"id": str(b.id), "environment_id": str(b.environment_id),
            "task_id": b.task_id and str(b.task_id),
            **{name: getattr(b, name) for name in FIELDS},
            **{name: _iso(getattr(b, name)) for name in TIMES}}



@admin.group()
def backup():
    """Backups and restores of environments."""


@command(backup, "list")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.option("--status", type=click.Choice([s.value for s in states.BackupStatus]))
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 100), default=20, show_default=True)
def backup_list(env_id, status, page, page_size):
    """The environment's backups, newest first."""
    from control_plane.services.backups import backups

    result = backups.list_backups(operator(), env_id, status=status, page=page, page_size=page_size)
    return {**result, "items": [_backup(b) for b in result["items"]]}


@command(backup, "create")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.option("--comment", help="Kept as the backup's notes")
def backup_create(env_id, comment):
    """Take a manual backup (a task for the environment's agent)."""
    from control_plane.services.backups import backups

    return _backup(backups.take(operator(), env_id, berth=current_berth(), comment=comment))


@command(backup, "restore")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.option("--backup", "backup_id", type=UUID_T,
              help="A completed backup of this environment or of another of its project")
@click.option("--at", "target_time", metavar="TIME", help="Instead of --backup: a moment "
              "(ISO 8601) of the source environment's point-in-time window")
@click.option("--from", "source", type=UUID_T, help="With --at: the environment read "
              "(default: --environment)")
@click.option("--no-neutralize", "keep_live", is_flag=True,
              help="Into staging or development: do not neutralise the restored database "
                   "(it keeps its mail servers, scheduled actions and payments live)")
@click.option("--profile", type=click.Choice(["standard", "strict"]), default=None,
              help="How the neutralised copy is checked (default: the environment's copy "
                   "policy; never weaker)")
@click.option("--anonymize", is_flag=True, default=None,
              help="Rewrite the copy's personal data, irreversibly")
def backup_restore(env_id, backup_id, target_time, source, keep_live, profile, anonymize):
    """Restore a backup, or a moment (--at), into the environment (a task; a safety
    backup first). Into staging or development the restored database is neutralised
    and checked."""
    import datetime as dt

    from control_plane.models import Backup
    from control_plane.services.backups import backups

    if (backup_id is None) == (target_time is None) or (source and not target_time):
        raise click.UsageError("Give --backup, or --at (with --from, if another environment).")
    try:
        moment = target_time and dt.datetime.fromisoformat(target_time.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter("an ISO 8601 time, e.g. 2026-12-01T09:41:00Z",
                                 param_hint="--at") from None
    d = backups.restore_into(operator(), env_id, backup_id, berth=current_berth(),
                             neutralize=False if keep_live else None, profile=profile,
                             anonymize=anonymize, target_time=moment,
                             source_environment_id=source)
    safety = Backup.get(Backup.task == d.id)
    extra = d.extra_data
    return {"task_id": str(d.id), "kind": d.kind, "status": d.status,
            "environment_id": str(d.environment_id), "backup_id": extra["backup_id"],
            "target_time": (extra.get("point_in_time") or {}).get("target_time"),
            "neutralize": extra.get("neutralize", False),
            "neutralize_profile": extra.get("profile"), "anonymize": extra.get("anonymize"),
            "safety_backup": _backup(safety)}


@command(backup, "export")
@click.option("--backup", "backup_id", type=UUID_T, required=True,
              help="A completed backup of a running environment")
def backup_export(backup_id):
    """Export a backup as Odoo's zip (a task for its environment's agent); then
    `export-url` gives the zip's download URL."""
    from control_plane.services.backups import odoo

    d = odoo.start_export(operator(), backup_id, berth=current_berth())
    return {"task_id": str(d.id), "kind": d.kind, "status": d.status,
            "environment_id": str(d.environment_id), "backup_id": str(backup_id)}


@command(backup, "export-url")
@click.option("--backup", "backup_id", type=UUID_T, required=True)
@click.option("--expires-in", type=click.IntRange(300, 86400), default=3600, show_default=True,
              help="Seconds")
def backup_export_url(backup_id, expires_in):
    """The exported zip's download URL (a plain GET, no auth header)."""
    from control_plane.services.backups import odoo

    link = odoo.export_url(operator(), backup_id, current_berth(), expires_in)
    return {**link, "expires_at": _iso(link["expires_at"])}
