"""The database: SQLite (WAL) by default, PostgreSQL when CP_DATABASE_URL says so."""

from pathlib import Path

import peewee
from playhouse.pool import PooledPostgresqlDatabase

database = peewee.DatabaseProxy()


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
    Path(path).parent.mkdir(parents=True, exist_ok=True)
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


def init(settings):
    """Bind the proxy to the configured database and return it."""
    db = make_database(settings)
    database.initialize(db)
    return db


def is_sqlite():
    return isinstance(database.obj, peewee.SqliteDatabase)


def for_update(query):
    """Row lock on PostgreSQL; SQLite's IMMEDIATE transactions already serialise writers."""
    return query if is_sqlite() else query.for_update()
