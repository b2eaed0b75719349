"""The daemon's state, written to a file so that `berth-agent status` can
tell the server owner what the agent is doing without asking the network."""

import datetime as dt
import json
import os
import threading
import time

from agent.config import write_private

OPERATION_WRITE_S = 1.0


def now_iso():
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusFile:
    def __init__(self, path, **initial):
        self.path = path
        self.lock = threading.Lock()
        self._op_written = 0.0
        self.state = {"pid": os.getpid(), "connected": False, "since": None,
                      "last_heartbeat": None, "last_error": None, "last_error_at": None,
                      **initial}
        self._write()

    def update(self, **changes):
        with self.lock:
            self.state.update(changes)
            self._write()

    def operation(self, key, **fields):
        """Start or advance a long piece of work (a backup, a restore) shown by
        `berth-agent status`; written at most every OPERATION_WRITE_S unless a
        field other than the byte count changed."""
        with self.lock:
            ops = self.state.setdefault("operations", {})
            entry = ops.setdefault(key, {})
            quiet = set(fields) <= {"bytes_done"} and (
                time.monotonic() - self._op_written < OPERATION_WRITE_S)
            entry.update(fields, updated_at=now_iso())
            if not quiet:
                self._op_written = time.monotonic()
                self._write()

    def end_operation(self, key):
        with self.lock:
            if (self.state.get("operations") or {}).pop(key, None) is not None:
                self._write()

    def error(self, message):
        self.update(last_error=message, last_error_at=now_iso())

    def _write(self):
        write_private(self.path, json.dumps(self.state, indent=2) + "\n")


def read(path):
    """The last state the daemon wrote, or None; `running` says whether it lives."""
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    state["running"] = _alive(state.get("pid"))
    if not state["running"]:
        state["connected"] = False
    return state


def _alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
