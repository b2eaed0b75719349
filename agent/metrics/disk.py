"""Disk used by each environment on this server, measured periodically (the
figures are "from the last measurement", not live):

- database: `pg_database_size` of the environment's database, asked inside its
  PostgreSQL container (a stopped one keeps its last figure: it cannot grow);
- filestore and add-ons: the blocks allocated to the files under those
  directories of the environment (what `du` counts; hard links once).

A pass runs every BERTH_AGENT_DISK_INTERVAL_SECONDS (default 900: 15 minutes),
and once when the daemon starts. It is cheap on a large, quiet filestore: a
tree is walked again only when one of its directories changed
(agent.metrics.disk_walk). The measuring thread runs at a lower CPU and I/O
priority, so it never starves the ERP or the agent's own stream."""

import contextlib
import logging
import os
import re
import threading
import time

from agent.errors import AgentError
from agent.metrics import engine, size
from agent.metrics.disk_walk import Tree

log = logging.getLogger("berth.agent")

DEFAULT_INTERVAL_S = 900
MIN_INTERVAL_S = 1.0
ENV_ROOT = "/srv/berth"  # agent.deploy.environments.DEFAULT_ROOT (metrics import no deploy module)
ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
SIZE_SQL = "SELECT pg_database_size(current_database())"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def interval_seconds():
    raw = os.environ.get("BERTH_AGENT_DISK_INTERVAL_SECONDS")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        return max(MIN_INTERVAL_S, float(raw))
    except ValueError:
        log.warning("BERTH_AGENT_DISK_INTERVAL_SECONDS=%r is not a number; using %s",
                    raw, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S


def env_root():
    return os.environ.get("BERTH_AGENT_ENV_ROOT", ENV_ROOT)


class DiskMeter:
    """One pass measures every environment found on this server: those with a
    directory under the environment root, and those with a PostgreSQL container."""

    def __init__(self, root=None, stop=None):
        self.root, self.stop = root, stop
        self.trees = {}  # (environment id, "filestore" | "addons") -> Tree
        self.databases = {}  # environment id -> last database figure
        self.attachments = {}  # environment id -> size.Attachments

    def measure(self):
        """[{environment_id, database_bytes, filestore_bytes, addons_bytes,
        measured_at_unix_ms, and what the size is made of (agent.metrics.size):
        largest_tables, filestore_files, attachments_missing, files_orphaned,
        missing_sample}]; a figure that could not be taken is None (or absent)."""
        root = self.root or env_root()
        try:
            names = [n for n in os.listdir(root) if UUID.match(n)]
        except OSError:
            names = []
        containers = self._databases()
        out = []
        for env_id in sorted(set(names) | set(containers)):
            figures = {"environment_id": env_id,
                       "database_bytes": self._database(env_id, containers.get(env_id))}
            for part in ("filestore", "addons"):
                tree = self.trees.get((env_id, part))
                if tree is None:
                    tree = self.trees[(env_id, part)] = Tree(
                        os.path.join(root, env_id, part), self.stop)
                figures[f"{part}_bytes"] = tree.measure()
            figures.update(self._made_of(root, env_id, containers.get(env_id)))
            figures["measured_at_unix_ms"] = int(time.time() * 1000)
            out.append(figures)
        present = {f["environment_id"] for f in out}
        for key in [k for k in self.trees if k[0] not in present]:  # destroyed meanwhile
            del self.trees[key]
        for key in [k for k in self.attachments if k not in present]:
            del self.attachments[key]
        return out

    def _made_of(self, root, env_id, container):
        """What the size is made of, from a running database container only."""
        if container is None or not container[1]:
            return {}
        check = self.attachments.setdefault(env_id, size.Attachments())
        filestore = os.path.join(root, env_id, "filestore", "filestore", size.DB_NAME)
        try:
            return {"largest_tables": size.largest_tables(container[0]),
                    **check.measure(container[0], filestore,
                                    self.trees[(env_id, "filestore")].walks)}
        except Exception:  # the disk figures still go; the next pass may do better
            log.exception("what the size of %s is made of was not measured", env_id)
            return {}

    def _databases(self):
        """{environment id: (container id, running)} of the PostgreSQL containers."""
        try:
            rows = engine.labeled_containers(f"{ROLE_LABEL}=postgres")
        except AgentError as exc:
            log.info("database sizes not measured: %s", exc)
            return {}
        found = {}
        for row in sorted(rows, key=lambda r: r.get("State") != "running"):
            env_id = (row.get("Labels") or {}).get(ENV_LABEL)
            if env_id and UUID.match(env_id) and env_id not in found:
                found[env_id] = (row["Id"], row.get("State") == "running")
        return found

    def _database(self, env_id, container):
        if container is not None and container[1]:
            rows = size.psql(container[0], SIZE_SQL)
            try:
                self.databases[env_id] = int(rows[0][0])
            except (TypeError, IndexError, ValueError):
                log.info("database size of %s not measured (%s)", env_id, rows)
        elif container is None:
            self.databases.pop(env_id, None)
        return self.databases.get(env_id)


def lower_priority():
    """Nice the calling thread (Linux: per thread; the I/O scheduler follows it)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
