"""The database: SQLite (WAL) by default, PostgreSQL when CP_DATABASE_URL says so."""

import functools
import hashlib
import logging
import os
import re
import weakref
from pathlib import Path

import peewee
from playhouse.pool import PooledPostgresqlDatabase

database = peewee.DatabaseProxy()
log = logging.getLogger("berth.db")


def after_commit(fn):
    """Run `fn` once the transaction around it has committed, in every thread
    (requests, scheduler jobs, the gateway's workers): a service wakes the gateway
    inside its transaction and the wake happens only on commit; a rollback drops
    it. Outside a transaction it runs at once. A callback that fails is logged:
    the change it follows is already committed."""
    def guarded():
        try:
            fn()
        except Exception:
            log.exception("an after-commit callback failed")

    database.after_commit(guarded)


def make_database(settings):
    url = settings.get("DATABASE_URL")
    if url and url.startswith(("postgres://", "postgresql://")):
        return _postgres(url)
    if url and url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    elif url:
        raise ValueError(f"unsupported CP_DATABASE_URL scheme: {url.split(':', 1)[0]}")
    else:
        path = str(Path(settings["DATA_DIR"]) / "berth.sqlite3")
    return _sqlite(path, settings.get("SQLITE_BUSY_TIMEOUT_MS", 15000))


def _sqlite(path, busy_timeout_ms):
    if path != ":memory:":
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Made owner-only before SQLite opens it: SQLite gives the -wal and -shm
        # files the database file's mode (the data dir is tightened in config.load).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    # BEGIN IMMEDIATE takes the write lock when a transaction starts, so
    # concurrent writers wait on busy_timeout instead of failing on upgrade.
    return peewee.SqliteDatabase(
        path,
        pragmas={
            "journal_mode": "wal",
            "busy_timeout": busy_timeout_ms,
            "foreign_keys": 1,
            "synchronous": "normal",
        },
        lock_type="IMMEDIATE",
        check_same_thread=False,
    )


def _postgres(url):
    from urllib.parse import unquote, urlparse

    u = urlparse(url)
    return PooledPostgresqlDatabase(
        unquote(u.path.lstrip("/")),
        user=unquote(u.username) if u.username else None,
        password=unquote(u.password) if u.password else None,
        host=u.hostname,
        port=u.port or 5432,
        max_connections=64,
        stale_timeout=300,
        timeout=10,
    )


_prepared_statements = True


def init(settings):
    """Bind the proxy to the configured database and return it."""
    global _prepared_statements
    db = make_database(settings)
    database.initialize(db)
    _prepared_statements = settings.get("DATABASE_PREPARED_STATEMENTS", True)
    return db


def is_sqlite():
    return isinstance(database.obj, peewee.SqliteDatabase)


def for_update(query, of=None):
    """Row lock on PostgreSQL (of the `of` model's rows only, in a join); SQLite's
    IMMEDIATE transactions already serialise writers."""
    if is_sqlite():
        return query
    return query.for_update(of=of) if of is not None else query.for_update()


_UUID_AS_TEXT = None
# PostgreSQL: each connection's statements prepared so far (see execute).
_PREPARED = weakref.WeakKeyDictionary()
_STATEMENTS = {}  # SQL text -> (PREPARE statement, EXECUTE statement)
_PLACEHOLDER = re.compile(r"%[%s]")


def _statement(sql):
    """PREPARE and EXECUTE statements for peewee's SQL (`%s` parameters, `%%` a
    literal percent), named by the text's hash: the same text, the same name on
    every connection."""
    hit = _STATEMENTS.get(sql)
    if hit is None:
        count = 0

        def number(match):
            nonlocal count
            if match.group() == "%%":
                return "%"
            count += 1
            return f"${count}"

        name = "berth_" + hashlib.sha256(sql.encode()).hexdigest()[:24]
        body = _PLACEHOLDER.sub(number, sql)
        args = f"({', '.join(['%s'] * count)})" if count else ""
        hit = _STATEMENTS[sql] = (f"PREPARE {name} AS {body}", f"EXECUTE {name}{args}")
    return hit


def execute(sql, params, text_uuids=False):
    """Run a fixed statement (compiled, or written once). On PostgreSQL it is
    prepared once per connection and then executed by name: the server parses and
    plans the hot statements (the key check, list pages, the event outbox's INSERT)
    once, not on every request. SQLite's driver keeps its own cache of prepared
    statements. With `text_uuids` (PostgreSQL), uuid columns are read as their
    text, which is what a list shows; psycopg2 would build a uuid.UUID per value
    only for the response to turn it back into text."""
    if is_sqlite():
        return database.execute_sql(sql, params)
    global _UUID_AS_TEXT
    import psycopg2.extensions as ext

    cursor = database.cursor()
    if text_uuids:
        if _UUID_AS_TEXT is None:
            _UUID_AS_TEXT = ext.new_type((2950,), "BERTH_UUID_TEXT", lambda value, cursor: value)
        ext.register_type(_UUID_AS_TEXT, cursor)
    with peewee.__exception_wrapper__:
        if not _prepared_statements:
            cursor.execute(sql, params)
            return cursor
        prepare, execute = _statement(sql)
        names = _PREPARED.get(cursor.connection)
        if names is None:
            names = _PREPARED[cursor.connection] = set()
        if prepare not in names:
            cursor.execute(prepare)  # not undone by a rollback: a session's statement
            names.add(prepare)
        cursor.execute(execute, params)
    return cursor


def found(sql, params):
    """Whether a fixed statement finds a row (`LIMIT 1` is added)."""
    return execute(sql + " LIMIT 1", params).fetchone() is not None


def execute_many(sql, rows):
    """One statement, many parameter rows. psycopg2's executemany makes a round trip
    per row; execute_batch sends them 200 to a round trip."""
    cursor = database.cursor()
    if is_sqlite():
        cursor.executemany(sql, rows)
    else:
        from psycopg2.extras import execute_batch

        execute_batch(cursor, sql, rows, page_size=200)


def columns(fields):
    """The quoted column names of model fields, comma-separated."""
    return ", ".join(f'"{f.column_name}"' for f in fields)


@functools.cache
def _insert_sql(model, names, param):
    fields = (model._meta.sorted_fields if names is None
              else [model._meta.fields[n] for n in names])
    return (f'INSERT INTO "{model._meta.table_name}" ({columns(fields)}) '
            f'VALUES ({", ".join([param] * len(fields))})'), fields


def insert_sql(model, names=None):
    """(INSERT statement, its fields) for a row of `model`: every field, or the
    fields `names` names, in that order. Built once per model, fields and database
    kind: peewee's query builder costs more than running the INSERT on hot paths."""
    return _insert_sql(model, names, database.param)
