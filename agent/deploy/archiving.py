"""An environment's WAL archiving as a deploy sets it up (protocol/wal.py): the
spool folder PostgreSQL copies finished WAL files into, and CONFIG, which tells
the agent's shipper (agent/backups/wal.py) where to upload them. Without
CONFIG the shipper leaves the environment alone."""

import json
import os
from pathlib import Path

from agent.config import WAL_ARCHIVING as CONFIG
from protocol import wal

SPOOL_DIR = "wal"  # in the environment's folder; SPOOL in the database container


def configure(env_dir, archiving):
    """`archiving` from the deploy's payload ({transfer_url, archive_timeout}, or None
    when the environment's backups are off): the spool made (PostgreSQL's user
    writes it) and CONFIG written, or CONFIG removed. Returns `archiving`."""
    env_dir = Path(env_dir)
    config = env_dir / CONFIG
    if not archiving:
        config.unlink(missing_ok=True)
        return None
    spool = env_dir / SPOOL_DIR
    spool.mkdir(mode=0o700, exist_ok=True)
    os.chown(spool, wal.POSTGRES_UID, wal.POSTGRES_UID)
    os.chmod(spool, 0o700)
    settings = {"transfer_url": str(archiving["transfer_url"]),
                "archive_timeout": int(archiving.get("archive_timeout") or wal.ARCHIVE_TIMEOUT)}
    temporary = config.with_suffix(".tmp")
    temporary.write_text(json.dumps(settings))
    temporary.replace(config)
    return settings


def read(env_dir):
    """The environment's archiving settings, or None."""
    try:
        return json.loads((Path(env_dir) / CONFIG).read_text())
    except (OSError, ValueError):
        return None
