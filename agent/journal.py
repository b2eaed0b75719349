"""The agent's memory of commands it has started, so that a redelivered
command (after a reconnect or a crash) is acknowledged but never run twice."""

import json
import threading

from agent.config import write_private


class CommandJournal:
    KEEP = 1000  # most recent command ids remembered

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        try:
            self.entries = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self.entries = {}

    def get(self, command_id):
        with self.lock:
            return self.entries.get(command_id)

    def start(self, command_id):
        """Record the start durably *before* executing: a crash mid-way then
        means "not run again", the at-most-once side of the trade-off."""
        with self.lock:
            if command_id in self.entries:
                return False
            self.entries[command_id] = {"state": "started"}
            self._save()
            return True

    def interrupt_unfinished(self, error, keep=()):
        """At start-up: commands a previous run started but never finished (it
        was killed) become failed with `error` (but those in `keep`), so a redelivery reports that
        instead of running them again. Returns their ids."""
        with self.lock:
            ids = [k for k, v in self.entries.items()
                   if v.get("state") == "started" and k not in keep]
            for command_id in ids:
                self.entries[command_id] = {"state": "done", "ok": False, "result": None,
                                            "error": error}
            if ids:
                self._save()
            return ids

    def finish(self, command_id, ok, result=None, error=None):
        with self.lock:
            self.entries[command_id] = {"state": "done", "ok": ok, "result": result,
                                        "error": error}
            self._save()

    def _save(self):
        if len(self.entries) > self.KEEP:
            for old in list(self.entries)[: len(self.entries) - self.KEEP]:
                del self.entries[old]
        write_private(self.path, json.dumps(self.entries))
