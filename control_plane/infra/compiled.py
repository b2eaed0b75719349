"""Statements rendered to SQL once and run many times (the per-request hot
paths: the key lookup, list pages), and their rows read as dicts."""

import orjson
import peewee

from control_plane.infra.db import database, execute, is_sqlite


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


def _one_step(sql, columns, sample, scalars=0, split=False):
    """SQLite: the statement that returns all rows of `sql` (its columns: label and
    model field or None) as one JSON array of objects, or False when they do not
    survive JSON exactly (floats, decimals, blobs; seen in the `sample` rows or
    declared). Its last `scalars` columns, the same on every row, come once, as
    columns of their own; with `split`, the rows come as their JSON objects
    joined by _RS instead of as an array.

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
    names = [_quoted(label) for label in labels]
    n = len(names) - scalars
    members = ", ".join(f"{_literal(label)}, {name}"
                        for label, name in zip(labels[:n], names[:n], strict=True))
    rows = (f"group_concat(json_object({members}), char({ord(_RS)}))" if split
            else f"json_group_array(json_object({members}))")
    return f"SELECT {', '.join([rows, *(f'max({name})' for name in names[n:])])} FROM ({sql})"


def _quoted(label):
    return '"' + label.replace('"', '""') + '"'


def _literal(label):
    return "'" + label.replace("'", "''") + "'"


_RS = "\x1e"  # between the JSON objects of split rows: JSON text holds it only escaped


class Shown:
    """How an API shows a list's rows: `render(row)` gives a row's JSON (bytes) and
    depends on nothing but the row (a schema's dump). Each distinct row is rendered
    once, then found by its raw form as the database returned it (SQLite: its JSON
    text; PostgreSQL: its values), which holds every value shown: a changed row is a
    new entry, never a stale one. Clients poll the same pages again and again:
    reading a 20-row page of projects as dicts and dumping it was a quarter of
    the request's time, and the JSON of rows seen before costs a dict lookup
    each. Bounded: emptied when full."""

    def __init__(self, render, size=2048):
        self.render, self.size, self.seen = render, size, {}

    def add(self, key, row):
        """Renders `row` (read as `key`); returns (its JSON, the row)."""
        entry = (orjson.Fragment(self.render(row)), row)
        if len(self.seen) >= self.size:
            self.seen.clear()
        self.seen[key] = entry
        return entry


class Rendered(list):
    """Rows in their JSON form already (orjson Fragments, from a Shown): an API's
    schema passes them through as they are."""


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

    def dicts(self, model, *args, shape=()):
        """The rows, each a dict."""
        rows, _ = self._read(model, args, shape, text_ids=False, scalars=0, shown=None)
        return rows

    def listed(self, model, *args, shape=(), scalars=0, shown=None):
        """A list page: its rows as dicts (ids as the API's text), and the values of
        its last `scalars` columns (the same on every row: a total), None when there
        is no row. With `shown` (a Shown), each row comes as (its JSON, the row);
        those rows are shared, not to be changed."""
        return self._read(model, args, shape, text_ids=True, scalars=scalars, shown=shown)

    def _read(self, model, args, shape, *, text_ids, scalars, shown):
        hit = self._render(shape, len(args), variant=(text_ids, scalars, shown is not None))
        sql, order, columns, packed = hit
        params = [args[i] for i in order]
        if packed:  # one row: the rows' JSON, then the scalars
            text, *tail = execute(packed, params).fetchone()
            if text is None or text == "[]":  # no row (group_concat, json_group_array)
                return [], None
            return _from_json(text, columns, shown), tail
        text_uuids = text_ids and not is_sqlite()
        cursor = execute(sql, params, text_uuids)
        raw = cursor.fetchall()
        if packed is None:  # until decided: label -> converter, then whether one step does
            labels = [d[0] for d in cursor.description]
            by_column = {f.column_name: f for f in model._meta.sorted_fields}
            columns = hit[2] = columns or [
                (label, None if text_uuids and _is_uuid(by_column.get(label))
                 else _converter(by_column.get(label), text_ids))
                for label in labels[:len(labels) - scalars]]
            if raw:  # decided once, on a first result
                hit[3] = is_sqlite() and _one_step(
                    sql, [(label, by_column.get(label)) for label in labels], raw, scalars,
                    split=shown is not None)
        if not raw:
            return [], None
        return _from_driver(raw, columns, scalars, shown), list(raw[0][len(columns):])

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


def _converted(rows, columns):
    """The rows (dicts), their values converted by the columns' converters: column
    by column, since most columns need nothing."""
    for name, conv in columns:
        if conv is not None:
            for row in rows:
                value = row[name]
                if value is not None:
                    row[name] = conv(value)
    return rows


def _from_json(text, columns, shown):
    """Rows from SQLite's one step (_one_step): a JSON array of them or, with
    `shown`, their JSON objects joined by _RS, each the key of its entry."""
    if shown is None:
        return _converted(orjson.loads(text), columns)
    parts = text.split(_RS)
    entries = list(map(shown.seen.get, parts))
    for i, entry in enumerate(entries):
        if entry is None:
            entries[i] = _first_shown(shown, parts[i], orjson.loads(parts[i]), columns)
    return entries


def _from_driver(raw, columns, scalars, shown):
    """Rows from the driver's tuples (their last `scalars` values left out): dicts
    or, with `shown`, entries keyed by the row's values."""
    names = [name for name, _ in columns]
    n = len(names)
    if shown is None:
        return _converted([dict(zip(names, row[:n], strict=True)) for row in raw], columns)
    entries = []
    for row in raw:
        key = row[:n] if scalars else row
        entry = shown.seen.get(key)
        if entry is None:
            entry = _first_shown(shown, key, dict(zip(names, key, strict=True)), columns)
        entries.append(entry)
    return entries


def _first_shown(shown, key, row, columns):
    """A row not shown before, or changed since: converted, rendered, remembered."""
    return shown.add(key, _converted([row], columns)[0])
