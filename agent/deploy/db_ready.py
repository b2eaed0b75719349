"""Waiting for an environment's PostgreSQL to accept connections, the one way the
agent does it (a deploy's start of the database, a restore's swap of its cluster).

With the cluster's folder on this server, its pid file is read: PostgreSQL marks
it `ready` once it accepts connections (a look at a file, not an exec). Else
pg_isready runs in the container, over TCP: the image's first start runs a
server for its init scripts on the socket only. Either way a container that
stopped ends the wait at once."""

import time

from agent.errors import engine_errors

FILE_POLL = 0.02  # seconds between looks at the pid file
EXEC_POLL = 0.25  # seconds between pg_isready runs (each exec costs tens of ms)
STATUS_POLL = 0.25  # seconds between asking the engine whether the container stopped


def wait_ready(db, timeout, data=None, since=None):
    """Whether PostgreSQL in `db` accepts connections within `timeout` s. `data`:
    the cluster's folder on this server; `since`: the time of the start waited for
    (a pid file older is a previous start's)."""
    since = time.time() - 1 if since is None else since
    deadline, looked = time.monotonic() + timeout, 0.0
    with engine_errors():
        while time.monotonic() < deadline:
            if data is not None and _ready(data / "postmaster.pid", since):
                return True
            if data is None and db.exec_run(["pg_isready", "-h", "127.0.0.1", "-U", "odoo"])[0] == 0:
                return True
            if time.monotonic() - looked > STATUS_POLL:
                looked = time.monotonic()
                db.reload()
                if db.status == "exited":
                    return False
            time.sleep(FILE_POLL if data is not None else EXEC_POLL)
    return False


def _ready(pid_file, since):
    try:
        if pid_file.stat().st_mtime < since:
            return False
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return len(lines) > 7 and lines[7].strip() == "ready"
