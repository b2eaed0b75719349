"""An environment's PostgreSQL as backups and restores use it: statements run by
psql in its container, and databases made, dropped and renamed with their
sessions ended first.

A restore's commands run inside the database container, where an agent's stop
does not end them: a pg_restore may go on loading (and its workers connecting),
a psql may still be making the staged database. Dropping what such a restore
staged therefore closes the database to connections before ending its sessions,
waits for those commands, and drops once more if one was still running."""

import time

from docker.errors import NotFound

from agent.backups import exec_stream
from agent.errors import engine_errors

DB = "odoo"  # the database and its owner in every environment
STAGED = "odoo_restore"  # a restore's database, loaded while the ERP still runs
REPLACED = "odoo_replaced"  # the database a restore replaced, dropped after it
TERMINATE_WAIT = 10  # seconds for ended sessions to go before a DROP or RENAME
LEFT_RUNNING_WAIT = 60  # seconds a roll back waits for database commands a stop left
COMMANDS = ("psql", "sh")  # how the agent's database commands start (pg_restore: in sh)


def psql(api, db, *sql, database=DB):
    """Each statement of `sql` on its own (its own transaction: DROP DATABASE runs in
    none), in one psql that stops at the first failure; its output, stripped."""
    return exec_stream.run(api, db.id, ["psql", "-X", "-q", "-t", "-A", "-U", DB,
                                        "-d", database, "-v", "ON_ERROR_STOP=1",
                                        *(a for s in sql for a in ("-c", s))],
                           what="psql").strip()


def recreate(api, db, database=DB, also_drop=()):
    """`database` made again empty, `also_drop` dropped: one psql (each of the engine's
    execs costs tens of milliseconds, more on a busy server)."""
    gone = (database, *also_drop)
    psql(api, db, *_closed(*gone), _terminate(*gone),
         *(f"DROP DATABASE IF EXISTS {d}" for d in gone),
         f"CREATE DATABASE {database} OWNER {DB} TEMPLATE template0 ENCODING 'UTF8'",
         database="postgres")


def drop(api, db, database):
    psql(api, db, *_closed(database), _terminate(database), f"DROP DATABASE IF EXISTS {database}",
         database="postgres")


def swap_in_staged(api, db):
    """The staged database renamed into the live one's place (the ERP stopped), the
    live one kept as REPLACED until the restore stands."""
    psql(api, db, _terminate(DB), f"ALTER DATABASE {DB} RENAME TO {REPLACED}",
         f"ALTER DATABASE {STAGED} RENAME TO {DB}", database="postgres")


def drop_staged(api, db):
    """A restore's staged database gone for good, though commands the restore started
    may still run (the module's docstring)."""
    drop(api, db, STAGED)
    if _await_left_running(api, db):  # one may have made it again after the drop
        drop(api, db, STAGED)


def _await_left_running(api, db):
    """Wait (at most LEFT_RUNNING_WAIT s) until no command of the agent's kind runs
    in the database container; whether any was running."""
    with engine_errors():
        running = [i for i in api.inspect_container(db.id).get("ExecIDs") or ()
                   if _running(api, i, first=True)]
        deadline = time.monotonic() + LEFT_RUNNING_WAIT
        waited = bool(running)
        while running and time.monotonic() < deadline:
            time.sleep(0.1)
            running = [i for i in running if _running(api, i)]
    return waited


def _running(api, exec_id, first=False):
    try:
        state = api.exec_inspect(exec_id)
    except NotFound:  # ended and forgotten by the engine
        return False
    if first and state.get("ProcessConfig", {}).get("entrypoint") not in COMMANDS:
        return False  # someone's shell, a measurement: not the agent's database work
    return bool(state.get("Running"))


def _closed(*databases):
    """The SQL (a list: empty or one statement) that closes `databases` (those that
    exist) to new connections, a superuser's too: a client connecting between the end
    of the sessions and a DROP fails it. Never the live database: were its DROP to fail
    after all, the ERP would be locked out of it."""
    names = ", ".join(f"'{d}'" for d in databases if d != DB)
    if not names:
        return []
    return ["DO $$ DECLARE name text; BEGIN "
            f"FOR name IN SELECT datname FROM pg_database WHERE datname IN ({names}) LOOP "
            "EXECUTE format('ALTER DATABASE %I ALLOW_CONNECTIONS false', name); "
            "END LOOP; END $$"]


def _terminate(*databases):
    """SQL that ends the sessions on `databases` and waits until they are gone (at
    most TERMINATE_WAIT s): pg_terminate_backend only signals them, and a DROP or a
    RENAME in the same psql right after it would still find them."""
    names = ", ".join(f"'{d}'" for d in databases)
    others = f"FROM pg_stat_activity WHERE datname IN ({names}) AND pid <> pg_backend_pid()"
    return (f"DO $$ DECLARE until timestamptz := clock_timestamp() + interval "
            f"'{TERMINATE_WAIT} seconds'; BEGIN LOOP "
            f"PERFORM pg_terminate_backend(pid) {others}; "
            "PERFORM pg_stat_clear_snapshot(); "  # else the activity seen is the first look's
            f"EXIT WHEN NOT EXISTS (SELECT 1 {others}) OR clock_timestamp() > until; "
            "PERFORM pg_sleep(0.01); END LOOP; END $$")


def run_throwaway(envs, live, name, env_id, role, volumes, start=True, waits_for=None):
    """A throwaway PostgreSQL beside the environment's (`live`, its container): the same
    image, settings and password, no network, archiving no WAL (the environment's spool
    is not its); `volumes` as the engine takes them. Created only, unless `start`.
    `waits_for`: a path in the container PostgreSQL starts only once it exists (the
    container's own start, the slower part, is then made before its data is ready)."""
    config = live.attrs.get("Config") or {}
    entrypoint = config.get("Entrypoint") or []
    if waits_for:
        entrypoint = ["sh", "-c", f'while [ ! -e {waits_for} ]; do sleep 0.01; done; '
                                  'exec "$0" "$@"', *entrypoint]
    with engine_errors():
        return (envs.docker.containers.run if start else envs.docker.containers.create)(
            config.get("Image") or live.image.id,
            [*(config.get("Cmd") or ["postgres"]), "-c", "archive_mode=off"],
            name=name, detach=True, network_mode="none", environment=config.get("Env") or [],
            labels=envs._labels(env_id, role), volumes=volumes,
            **({"entrypoint": entrypoint} if waits_for else {}))
