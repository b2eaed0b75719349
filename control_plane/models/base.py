"""Base model: UUID primary keys, naive-UTC timestamps, a portable JSON field."""

import datetime as dt
import json
import uuid

import peewee

from control_plane.infra import clock
from control_plane.infra.db import database, execute, insert_sql


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
        kind instead of by peewee's query builder on every call (and on PostgreSQL
        prepared once per connection)."""
        row = cls(**values)
        sql, fields = insert_sql(cls)
        execute(sql, [f.db_value(row.__data__.get(f.name)) for f in fields])
        row._dirty.clear()
        return row
