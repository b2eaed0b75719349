"""`berthctl backups`: list, download and drills (public API), create, restore and
drill (the operations API: the public one has no such endpoints)."""

import hashlib
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

import click

from berthctl.commands import ID
from berthctl.errors import SERVER, CliError
from berthctl.output import echo, emit, human_bytes, printable
from berthctl.tasks import echo_for, follow

COLUMNS = [("ID", "id"), ("STATUS", "status"), ("TYPE", "backup_type"),
           ("SIZE", lambda b: human_bytes(b.get("compressed_size"))),
           ("CREATED", "created_at"), ("NOTES", "notes")]
CHUNK = 1 << 16
PARTS = ("database", "filestore", "manifest")
DRILL_COLUMNS = [("ID", "id"), ("STATUS", "status"), ("TRIGGER", "trigger"),
                 ("BACKUP", "backup_id"),
                 ("RESTORE", lambda d: f"{d['restore_seconds']:.1f} s"
                  if d.get("restore_seconds") is not None else "-"),
                 ("CREATED", "created_at"), ("ERROR", "error_message")]


@click.group()
def backups():
    """Backups of environments."""


@backups.command("list")
@click.argument("env_id", type=ID)
@click.option("--status", type=click.Choice(["pending", "running", "completed", "failed",
                                             "cancelled"]))
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.pass_obj
def list_(state, env_id, status, limit):
    """An environment's backups, newest first."""
    page = state.client.get(f"/environments/{env_id}/backups", status=status, page_size=limit)
    emit(state, page, COLUMNS, rows=page["items"])


@backups.command()
@click.argument("env_id", type=ID)
@click.option("--comment", help="Kept as the backup's notes.")
@click.option("--wait", is_flag=True, help="Follow the backup task until it ends.")
@click.pass_obj
def create(state, env_id, comment, wait):
    """Take a manual backup (operations API: needs a user token)."""
    client = state.client
    backup = client.ops("POST", f"/environments/{env_id}/backups",
                        body={"backup_type": "manual", "comment": comment})
    if wait:
        echo(f"Backup {backup['id']}, task {backup['task_id']}:", err=True)
        follow(client, env_id, backup["task_id"], echo_for(state))
        page = client.get(f"/environments/{env_id}/backups", page_size=100)
        backup = next((b for b in page["items"] if b["id"] == backup["id"]), backup)
    emit(state, backup, COLUMNS)


@backups.command()
@click.argument("env_id", type=ID)
@click.argument("backup_id", type=ID, required=False)
@click.option("--at", "target_time", metavar="TIME", help="Instead of BACKUP_ID: the moment "
              "(ISO 8601, e.g. 2026-12-01T09:41:00Z) to bring the database and filestore "
              "back to, within the window `backups wal` shows.")
@click.option("--from", "source", type=ID, help="With --at: the environment read (default "
              "ENV_ID), e.g. production into a staging copy.")
@click.option("--neutralize/--no-neutralize", default=None, help="Whether the restored "
              "database is neutralised (default: yes, except into production).")
@click.option("--profile", type=click.Choice(["standard", "strict"]), default=None,
              help="How the neutralised copy is checked (default: the environment's copy "
                   "policy; never weaker).")
@click.option("--anonymize", is_flag=True, default=None,
              help="Rewrite the copy's personal data, irreversibly.")
@click.option("--wait", is_flag=True, help="Follow the restore task until it ends.")
@click.pass_obj
def restore(state, env_id, backup_id, target_time, source, neutralize, profile, anonymize,
            wait):
    """Restore BACKUP_ID, or with --at a moment, into ENV_ID (operations API: needs a
    user token). A safety backup is taken first and put back if the restore fails."""
    if (backup_id is None) == (target_time is None):
        raise click.UsageError("Give either BACKUP_ID or --at TIME.")
    if source and not target_time:
        raise click.UsageError("--from goes with --at.")
    client = state.client
    body = {}
    for field, value in (("backup_id", backup_id), ("target_time", target_time),
                         ("source_environment_id", source), ("neutralize", neutralize),
                         ("neutralize_profile", profile), ("anonymize", anonymize)):
        if value is not None:
            body[field] = value
    task = client.ops("POST", f"/environments/{env_id}/restore", body=body)
    if wait:
        echo(f"Restore task {task['id']}:", err=True)
        task = follow(client, env_id, task["id"], echo_for(state))
    emit(state, task)


@backups.command()
@click.argument("backup_id", type=ID)
@click.option("-o", "--out", "out", metavar="PATH", help="All parts: a directory (default "
              "the current one). One part: the file (default named after it), - for stdout.")
@click.option("--part", type=click.Choice(["all", *PARTS]), default="all", show_default=True)
@click.pass_obj
def download(state, backup_id, out, part):
    """Download a completed backup: each file written whole or not at all, checked
    against the sizes and SHA-256 sums of its manifest."""
    client = state.client
    urls = client.get(f"/backups/{backup_id}/download")
    manifest_bytes = _fetch(client, urls["manifest_url"])
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError:
        raise CliError("The backup's manifest is not JSON.", SERVER) from None
    names = {"database": _object(manifest, "database", "database.dump"),
             "filestore": _object(manifest, "filestore", "filestore.tar.zst"),
             "manifest": "manifest.json"}
    objects = (manifest.get("filestore") or {}).get("layout") == "objects"
    if objects:  # the project's objects, composed into one tar by the control plane
        names["filestore"] = "filestore.tar"
    wanted = PARTS if part == "all" else (part,)
    written = []
    for name in wanted:
        filename = f"backup-{backup_id}-{names[name]}"
        if part == "all":
            dest = Path(out or ".") / filename
        else:
            dest = None if out == "-" else Path(out or filename)
        expected = manifest.get(name) if name != "manifest" else None
        if name == "filestore" and objects:
            expected = {"files": manifest["filestore"].get("files")}
        if name == "manifest":
            _write(dest, [manifest_bytes], len(manifest_bytes), filename)
        else:
            _download(client, urls[f"{name}_url"], dest, filename, expected)
        written.append({"part": name, "path": str(dest) if dest else "-"})
    if dest is not None:
        emit(state, {"backup_id": backup_id, "files": written}, [("PART", "part"),
                                                                  ("PATH", "path")],
             rows=written)


def _object(manifest, part, default):
    name = (manifest.get(part) or {}).get("object") or default
    return os.path.basename(name)  # never a path the manifest could point elsewhere


def _fetch(client, url):
    with client.open_download(url) as resp:
        return resp.read()


def _download(client, url, dest, label, expected):
    with client.open_download(url) as resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None

        def chunks():
            while chunk := resp.read(CHUNK):
                yield chunk
        _write(dest, chunks(), total, label, expected)


def _write(dest, chunks, total, label, expected=None):
    """Stream into a temporary file beside `dest`, check it, then rename it into
    place: an interrupted or corrupt download never leaves a file that looks whole."""
    digest, size = hashlib.sha256(), 0
    if dest is None:
        target, tmp = sys.stdout.buffer, None
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        target = os.fdopen(fd, "wb")
    try:
        with click.progressbar(length=total, label=printable(label), file=sys.stderr,
                               show_pos=total is None) as bar:
            for chunk in chunks:
                target.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
        _check(label, size, digest.hexdigest(), total, expected)
        if tmp and (expected or {}).get("files") is not None:
            target.flush()
            _check_tar(label, tmp, expected["files"])
        if tmp:
            target.flush()
            os.fsync(target.fileno())
            target.close()
            os.replace(tmp, dest)
            tmp = None
    finally:
        if tmp:
            target.close()
            Path(tmp).unlink(missing_ok=True)


def _check(label, size, sha256, total, expected):
    if total is not None and size != total:
        raise CliError(f"{label}: the download ended after {size} of {total} bytes.", SERVER)
    expected = expected or {}
    if expected.get("size") is not None and size != expected["size"]:
        raise CliError(f"{label}: {size} bytes, the manifest says {expected['size']}.", SERVER)
    if expected.get("sha256") and sha256 != expected["sha256"]:
        raise CliError(f"{label}: SHA-256 {sha256} differs from the manifest's "
                       f"{expected['sha256']}.", SERVER)


def _check_tar(label, path, files):
    """A composed filestore: a whole tar (read to its end) with the manifest's files."""
    try:
        with tarfile.open(path) as tar:
            found = sum(1 for member in tar if member.isfile())
    except (tarfile.TarError, OSError) as exc:
        raise CliError(f"{label}: not a whole tar archive ({exc}).", SERVER) from None
    if found != files:
        raise CliError(f"{label}: {found} files, the manifest says {files}.", SERVER)


COMMANDS = [backups]


@backups.command()
@click.argument("env_id", type=ID)
@click.option("--backup", "backup_id", type=ID, help="A completed backup of the environment "
              "(default: its newest).")
@click.option("--at", "target_time", metavar="TIME", help="Instead: a moment (ISO 8601) of "
              "its point-in-time window.")
@click.option("--wait", is_flag=True, help="Follow the drill until it ends.")
@click.pass_obj
def drill(state, env_id, backup_id, target_time, wait):
    """Restore a backup, or a moment, into a throwaway copy and prove it (operations API:
    needs a user token). The environment serves on, untouched."""
    if backup_id and target_time:
        raise click.UsageError("Give --backup or --at, not both.")
    client = state.client
    body = {"backup_id": backup_id} if backup_id else {}
    if target_time:
        body["target_time"] = target_time
    shown = client.ops("POST", f"/environments/{env_id}/drills", body=body)
    if wait:
        echo(f"Drill {shown['id']} of backup {shown['backup_id']}:", err=True)
        try:
            follow(client, env_id, shown["id"], echo_for(state))
        finally:
            page = client.get(f"/environments/{env_id}/drills", page_size=20)
            shown = next((d for d in page["items"] if d["id"] == shown["id"]), shown)
            emit(state, shown, DRILL_COLUMNS)
        return
    emit(state, shown, DRILL_COLUMNS)


@backups.command()
@click.argument("env_id", type=ID)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.pass_obj
def drills(state, env_id, limit):
    """An environment's restore drills, newest first: passed or failed, time to restore."""
    page = state.client.get(f"/environments/{env_id}/drills", page_size=limit)
    emit(state, page, DRILL_COLUMNS, rows=page["items"])


@backups.command()
@click.argument("env_id", type=ID)
@click.pass_obj
def wal(state, env_id):
    """An environment's WAL archiving: off, starting, archiving or failing (and why),
    the files in storage and how far behind."""
    emit(state, state.client.get(f"/environments/{env_id}/wal-archive"))
