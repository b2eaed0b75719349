"""A restore drill (the `drill` command): a backup restored into a throwaway copy
on the environment's server, proven, then removed; the environment itself is not
touched and keeps serving.

The copy is a PostgreSQL container with no network at all (its data under the
environment's directory, `drill/`), from the environment's database image and
settings, and an ERP container from the environment's ERP image, configuration
and add-ons in that container's network namespace, told to use the database at
127.0.0.1: nothing routes to it, and it cannot reach the environment's database
or send anything out. It is neutralised and checked as a `standard` copy is
(safe_copy.py) before its ERP starts, with no scheduled actions.

What is proven: the dump loads; each table holds as many rows as the dump's data
has for it (counted from the dump file itself before neutralising); the ERP
answers its health check; every attachment stored in the filestore
(`ir_attachment.store_fname`) is there and its SHA-1 is its `checksum`. The
objects themselves are checked against the backup's manifest as they are read
(size and SHA-256), so an object changed in storage fails the drill."""

import contextlib
import hashlib
import shutil
import time

from agent.backups import databases, pitr, safe_copy
from agent.backups.databases import DB
from agent.backups.neutralize import neutralize
from agent.errors import AgentError, engine_errors
from protocol.errors import AgentErrorCode

PORT = 18069  # the copy's ERP, inside the copy's own network namespace
CONFIG = "/etc/odoo/odoo.conf"
DATA = "/var/lib/odoo"
HEALTH_POLL = 0.5
FINDINGS_SHOWN = 10  # of each kind, in the error; the count says the rest


class DrillError(AgentError):
    """`partial_result`: what the drill measured before it failed."""

    code = AgentErrorCode.DRILL_FAILED

    def __init__(self, message=None, result=None):
        super().__init__(message)
        self.partial_result = result


class _Copy:
    """The throwaway copy's containers and directory, named after the environment."""

    def __init__(self, envs, env_id):
        n = envs._names(env_id)
        self.envs, self.env_id, self.dir = envs, env_id, n["dir"] / "drill"
        self.db_name, self.erp_name = f"{n['db']}-drill", f"{n['erp']}-drill"
        self.live_db, self.live_erp = envs._container(n["db"]), envs._container(n["erp"])
        if self.live_db is None or self.live_erp is None:
            raise DrillError("the environment has no containers to copy from")

    def remove(self):
        for name in (self.erp_name, self.db_name):
            if (container := self.envs._container(name)) is not None:
                with contextlib.suppress(AgentError), engine_errors():
                    container.remove(force=True, v=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_database(self, log):
        """PostgreSQL from the environment's image, settings and password, no network."""
        (self.dir / "pgdata").mkdir(parents=True)
        db = databases.run_throwaway(self.envs, self.live_db, self.db_name, self.env_id, "drill", {
            str(self.dir / "pgdata"): {"bind": "/var/lib/postgresql/data", "mode": "rw"}})
        self.envs._wait_db(db, log)
        return db

    def binds(self):
        """The ERP's mounts, its data directory the copy's."""
        return [b for b in (self.live_erp.attrs.get("HostConfig") or {}).get("Binds") or []
                if b.split(":")[1] != DATA] + [f"{self.dir / 'data'}:{DATA}:rw"]

    def start_erp(self, log):
        """The ERP on the copy's database and filestore, no scheduled actions."""
        config = self.live_erp.attrs.get("Config") or {}
        with engine_errors():
            erp = self.envs.docker.containers.run(
                config.get("Image") or self.live_erp.image.id,
                ["odoo", "-c", CONFIG, "--db_host", "127.0.0.1", "-p", str(PORT),
                 "--max-cron-threads=0"],
                name=self.erp_name, detach=True, network_mode=f"container:{self.db_name}",
                environment=config.get("Env") or [], volumes=self.binds(),
                labels=self.envs._labels(self.env_id, "drill"))
        log("info", "drill: the copy's ERP is starting (unrouted, no network of its own)")
        return erp

    def wait_healthy(self, erp, timeout):
        """Until the ERP answers /web/health inside its namespace (asked from within)."""
        probe = ["python3", "-c", "import sys, urllib.request as u; sys.exit(u.urlopen("
                 f"'http://127.0.0.1:{PORT}/web/health', timeout=5).status != 200)"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with engine_errors():
                erp.reload()
                if erp.status == "exited":
                    tail = erp.logs(tail=5).decode(errors="replace").strip()
                    raise DrillError(f"the copy's ERP exited: {tail}")
                code, _ = erp.exec_run(probe)
            if code == 0:
                return
            time.sleep(HEALTH_POLL)
        raise DrillError(f"the copy's ERP did not answer its health check within {timeout} s")


def _counted(api, db, expected):
    """{table: rows} of the loaded copy, for the tables the dump has data for."""
    tables = sorted(expected)
    if not tables:
        return {}
    out = databases.psql(api, db, *(f"SELECT count(*) FROM {t}" for t in tables))
    return dict(zip(tables, (int(n) for n in out.split()), strict=True))


def _rows_problems(expected, found):
    return [f"{t}: {found.get(t)} rows, the dump has {n}" for t, n in sorted(expected.items())
            if found.get(t) != n]


def _attachment_problems(api, db, filestore):
    """Each stored attachment's file present and hashing to its checksum."""
    if databases.psql(api, db, "SELECT count(*) FROM information_schema.columns WHERE "
                      "table_name = 'ir_attachment' AND column_name IN "
                      "('store_fname', 'checksum')") != "2":
        return 0, []
    rows = databases.psql(api, db, "SELECT store_fname || '|' || coalesce(checksum, '') FROM "
                                   "ir_attachment WHERE store_fname IS NOT NULL")
    problems, count = [], 0
    for line in rows.splitlines():
        name, _, checksum = line.partition("|")
        count += 1
        path = filestore / name
        if ".." in name.split("/") or not path.is_file():
            problems.append(f"attachment file {name} is missing")
            continue
        digest = hashlib.sha1()  # Odoo's own checksum of an attachment
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if checksum and digest.hexdigest() != checksum:
            problems.append(f"attachment file {name} does not hash to its checksum")
    return count, problems


def _shown(problems):
    more = len(problems) - FINDINGS_SHOWN
    return "; ".join(problems[:FINDINGS_SHOWN]) + (f"; and {more} more" if more > 0 else "")


@contextlib.contextmanager
def _dump(source, log):
    """(where the dump downloads from, what it must be): a stored backup's, or the
    database recovered to a point in time."""
    if isinstance(source, pitr.Recovered):
        with source.recovered(log) as recovered:
            yield recovered
    else:
        yield source.transfer, source.manifest["database"]


def drill(backups, payload, log):
    """The drill of `payload["backup_id"]` for the environment, or with
    `point_in_time` of that moment (agent/backups/pitr.py); its result, or
    DrillError (with what it measured) when anything fails or does not check."""
    from agent.backups.backups import _Stored

    env_id = payload["environment_id"]
    copy = _Copy(backups.envs, env_id)
    copy.remove()  # one an agent stop left
    started, result = time.monotonic(), {"backup_id": payload["backup_id"]}
    problems = []
    try:
        source = _Stored(backups, payload["transfer_url"], payload["backup_id"])
        if payload.get("point_in_time"):
            source = pitr.Recovered(backups, payload, source)
        log("info", f"drill: restoring {source.name} into a throwaway copy")
        backups.progress(phase="drill: starting the copy's database")
        db = copy.start_database(log)

        def files():
            source.unpack(copy.dir, log)
            (copy.dir / "filestore.new").rename(copy.dir / "data")

        with _dump(source, log) as (dump, wanted):
            expected = backups._load_database(dump, wanted, db, log, "drill", alongside=files,
                                              count_rows=True)
        if payload.get("point_in_time"):
            result["point_in_time"] = source.summary
        problems += _rows_problems(expected, _counted(backups.api, db, expected))
        result.update(tables=len(expected), rows=sum(expected.values()))
        log("info", f"drill: {len(expected)} tables, {result['rows']} rows loaded"
                    + ("" if problems else ", each table's rows as many as the dump's"))
        backups.progress(phase="drill: neutralising the copy")
        neutralize(backups.envs, env_id, DB, log, network_of=copy.db_name, db_host="127.0.0.1",
                   volumes=copy.binds())
        safe_copy.make_safe(backups.api, db, DB, log=log)
        backups.progress(phase="drill: starting the copy's ERP")
        copy.wait_healthy(copy.start_erp(log), backups.envs.health_timeout)
        result["restore_seconds"] = round(time.monotonic() - started, 1)
        log("info", f"drill: the copy's ERP answers its health check, "
                    f"{result['restore_seconds']} s after the drill began")
        count, missing = _attachment_problems(backups.api, db, copy.dir / "data" / "filestore"
                                              / DB)
        result["attachments"] = count
        problems += missing
        if not missing:
            log("info", f"drill: {count} stored attachments present, each hashing right")
    except DrillError as exc:
        exc.partial_result = result
        raise
    except AgentError as exc:
        raise DrillError(f"the drill failed: {exc}", result) from exc
    finally:
        copy.remove()
        log("info", "drill: the copy is removed")
    if problems:
        raise DrillError(f"the drill's copy does not check: {_shown(problems)}", result)
    return {**result, "passed": True}
