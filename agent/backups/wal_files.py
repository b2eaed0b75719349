"""The filestore files that appear between backups, archived beside the WAL: a
point-in-time restore needs every attachment file the database at the target
names, and one written after the last backup is in no backup yet.

Every FILES_SECONDS the WAL shipper walks the ERP's attachments (`filestore/` of
its data directory) for files it has not seen, and sends each whose content the
project holds nowhere yet (not in a backup's pack, not archived) as
`files/<sha256>.zst` with its path. A file Odoo names by its content's SHA-1 is
sent once it hashes to its name (Odoo writes it in place, so a file being written
does not yet); another once it has been left alone for SETTLE seconds. What was
seen is kept in STATE, so a pass after the first hashes only new files."""

import hashlib
import json
import os
import re

from agent.config import write_private
from protocol import wal

STATE = ".berth-archived-files.json"  # {path in the data directory: sha256}
FILES_SECONDS = 30
SETTLE = 5
BATCH = 100  # files asked about, then sent, in one go
ODOO_NAME = re.compile(r"[0-9a-f]{2}/([0-9a-f]{40})")


def _load(path):
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _new(data_dir, state, now):
    """(present paths, [(path, sha256)] of settled files not in `state`)."""
    present, found = set(), []
    top = data_dir / wal.FILESTORE_DIR
    for root, _, names in os.walk(top):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, data_dir)
            present.add(rel)
            if rel in state or len(found) >= BATCH:
                continue
            try:
                if now - os.lstat(full).st_mtime < SETTLE and not ODOO_NAME.search(rel):
                    continue
                sha256, sha1 = _hashes(full)
            except OSError:  # removed meanwhile (Odoo's garbage collector)
                continue
            odoo = ODOO_NAME.search(rel)
            if odoo and rel.endswith(odoo.group(0)) and odoo.group(1) != sha1:
                continue  # still being written
            found.append((rel, sha256))
    return present, found


def _hashes(path):
    sha256, sha1 = hashlib.sha256(), hashlib.sha1()  # noqa: S324  (Odoo's own name)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def ship(transfer, env_dir, upload, suffix, now):
    """One pass for the environment; `upload(path, name, fields)` sends one file.
    Returns (files sent, error or None)."""
    state_file, data_dir = env_dir / STATE, env_dir / "filestore"
    state = _load(state_file)
    present, found = _new(data_dir, state, now)
    sent, error = 0, None
    if found:
        names = {rel: f"files/{sha}{suffix}" for rel, sha in found}
        stored = set(transfer.call("known", {"objects": sorted(set(names.values()))})["stored"])
        for rel, sha in found:
            if names[rel] not in stored:
                try:
                    upload(data_dir / rel, names[rel], {"path": rel})
                except Exception as exc:  # noqa: BLE001  (reported; the next pass tries again)
                    error = f"{rel}: {exc}"
                    break
                stored.add(names[rel])
                sent += 1
            state[rel] = sha
    kept = {rel: sha for rel, sha in state.items() if rel in present}
    if found or len(kept) != len(state):
        write_private(state_file, json.dumps(kept, separators=(",", ":")))
    return sent, error
