"""The database: SQLite (WAL) by default, PostgreSQL when CP_DATABASE_URL says so."""

import functools
import hashlib
import logging
import os
import re
import weakref
from pathlib import Path

import orjson
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


def _converter(field, text_ids):
    """A column's conversion to Python, or None where both drivers already return
    the right type (text and integers): a list page converts ~200 values. With
    `text_ids`, UUID columns become their canonical text (what the API shows),
    not uuid.UUID objects that the response would turn back into text."""
    if field is None or type(field) in (peewee.CharField, peewee.TextField,
                                         peewee.IntegerField, peewee.BigIntegerField):
        return None
    target = field.rel_field if isinstance(field, peewee.ForeignKeyField) else field
    if text_ids and isinstance(target, peewee.UUIDField):
        return uuid_text
    return field.python_value


_UUID_TEXTS = {}  # SQLite's hex -> canonical text: list pages show the same ids again and again
_UUID_TEXTS_MAX = 65536


def uuid_text(value):
    """'0123…cdef' (SQLite's 32 hex digits) or PostgreSQL's text -> canonical UUID text."""
    if type(value) is not str:
        return str(value)
    text = _UUID_TEXTS.get(value)
    if text is not None:
        return text
    if len(value) != 32:
        return value
    if len(_UUID_TEXTS) >= _UUID_TEXTS_MAX:  # bounded; ids are not secrets
        _UUID_TEXTS.clear()
    text = _UUID_TEXTS[value] = (
        f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}")
    return text


def _is_uuid(field):
    target = field.rel_field if isinstance(field, peewee.ForeignKeyField) else field
    return isinstance(target, peewee.UUIDField)


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


_INEXACT_IN_JSON = (peewee.FloatField, peewee.DecimalField, peewee.BlobField)


def _one_step(sql, columns, sample):
    """SQLite: the statement that returns all rows of `sql` (its columns: label and
    model field or None) as one JSON array of objects, or False when they do not
    survive JSON exactly (floats, decimals, blobs; seen in the `sample` rows or
    declared).

    The sqlite3 driver releases the interpreter lock for every row it steps, and
    with requests on several threads each release hands the lock to another
    thread: a 20-row page cost ~20 thread switches, now one. Objects, not arrays:
    orjson makes the dicts (~35 µs a 20-row page less than zipping arrays in
    Python). SQLite keeps the order of an ORDER BY subquery for the aggregate over
    it (its query flattener leaves such a subquery alone so that order-sensitive
    aggregates see it)."""
    labels = [label for label, _ in columns]
    if len(set(labels)) != len(labels) or any(isinstance(f, _INEXACT_IN_JSON) for _, f in columns):
        return False
    if any(type(value) not in (str, int, type(None)) for row in sample for value in row):
        return False
    members = ", ".join("'" + label.replace("'", "''") + "', \"" + label.replace('"', '""') + '"'
                        for label in labels)
    return f"SELECT json_group_array(json_object({members})) FROM ({sql})"


class Compiled:
    """A query rendered to SQL once per dialect and shape, then run with fresh
    parameters. peewee takes ~20x longer to render a SELECT than SQLite takes to
    run it, so the per-request hot paths (key lookup, list pages) render once.

    `build(*markers, shape=...)` returns the peewee query, with each parameter in
    place of one marker; parameters are passed already in database form (e.g.
    `uuid.hex`), since peewee's converters do not run on them. Rows come back
    as dicts keyed by the SQL column labels, converted by the model's fields."""

    def __init__(self, build):
        self.build = build
        self._cache = {}

    def _render(self, shape, nparams, variant=None):
        # The SQL text depends only on the dialect; `variant` keeps apart the row
        # converters of callers that read the same SQL differently.
        key = (type(database.obj), shape, variant)
        hit = self._cache.get(key)
        if hit is None:
            markers = [f"\x00berth-param-{i}\x00" for i in range(nparams)]
            sql, params = self.build(*markers, shape=shape).sql()
            hit = self._cache[key] = [sql, [markers.index(p) for p in params], None, None]
        return hit

    def dicts(self, model, *args, shape=(), text_ids=False):
        hit = self._render(shape, len(args), variant=text_ids)
        sql, order, columns, packed = hit
        params = [args[i] for i in order]
        if packed:  # the rows as dicts already
            rows = orjson.loads(execute(packed, params).fetchone()[0])
        else:
            text_uuids = text_ids and not is_sqlite()
            cursor = execute(sql, params, text_uuids)
            raw = cursor.fetchall()
            if packed is None:  # until decided: label -> converter, then whether one step does
                by_column = {f.column_name: f for f in model._meta.sorted_fields}
                columns = hit[2] = columns or [
                    (d[0], None if text_uuids and _is_uuid(by_column.get(d[0]))
                     else _converter(by_column.get(d[0]), text_ids))
                    for d in cursor.description]
                if raw:  # decided once, on a first result
                    hit[3] = is_sqlite() and _one_step(
                        sql, [(name, by_column.get(name)) for name, _ in columns], raw)
            names = [name for name, _ in columns]
            rows = [dict(zip(names, row, strict=True)) for row in raw]
        for name, conv in columns:  # column by column: most columns need nothing
            if conv is not None:
                for row in rows:
                    value = row[name]
                    if value is not None:
                        row[name] = conv(value)
        return rows

    def row(self, *args, shape=()):
        """The first row as the driver returns it (no conversion), or None."""
        sql, order, *_ = self._render(shape, len(args), variant="raw")
        return execute(sql, [args[i] for i in order]).fetchone()

    def exists(self, *args, shape=()):
        sql, order, *_ = self._render(shape, len(args))
        return execute(sql, [args[i] for i in order]).fetchone() is not None

    def scalar(self, *args, shape=()):
        sql, order, *_ = self._render(shape, len(args))
        return execute(sql, [args[i] for i in order]).fetchone()[0]
