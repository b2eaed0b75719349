"""Statements rendered to SQL once and run many times (the per-request hot
paths: the key lookup, list pages), and their rows read as dicts."""

import orjson
import peewee

from control_plane.db import database, execute, is_sqlite


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
