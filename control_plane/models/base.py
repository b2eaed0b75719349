"""Base model: UUID primary keys, naive-UTC timestamps, a portable JSON field."""

import datetime as dt
import functools
import json
import uuid

import peewee

from control_plane import clock
from control_plane.db import database


class DateTimeField(peewee.DateTimeField):
    """Naive UTC. Parses SQLite's text with `fromisoformat` (C) instead of
    peewee's trial-and-error `strptime`, which dominated the cost of reading rows."""

    def python_value(self, value):
        if isinstance(value, str):
            return dt.datetime.fromisoformat(value)
        return value


class JSONField(peewee.TextField):
    """JSON stored as text: the same on SQLite and PostgreSQL."""

    def db_value(self, value):
        return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)

    def python_value(self, value):
        return None if value is None else json.loads(value)


class BaseModel(peewee.Model):
    id = peewee.UUIDField(primary_key=True, default=uuid.uuid4)
    created_at = DateTimeField(default=clock.now, index=True)

    class Meta:
        database = database
        legacy_table_names = False

    @classmethod
    def add(cls, **values):
        """`create` for rows written on hot paths (the event outbox): the same row,
        with every field's default, by an INSERT built once per model and database
        kind instead of by peewee's query builder on every call."""
        row = cls(**values)
        fields = cls._meta.sorted_fields
        database.execute_sql(_insert_sql(cls, database.param),
                             [f.db_value(row.__data__.get(f.name)) for f in fields])
        row._dirty.clear()
        return row


@functools.cache
def _insert_sql(model, param):
    fields = model._meta.sorted_fields
    return (f'INSERT INTO "{model._meta.table_name}" '
            f'({", ".join(chr(34) + f.column_name + chr(34) for f in fields)}) '
            f'VALUES ({", ".join([param] * len(fields))})')
