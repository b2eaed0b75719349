"""The spec's three pagination styles. Queries are bounded with LIMIT (keyset
for cursors), never by slicing a loaded table."""

import datetime
import uuid

import marshmallow as ma
from flask import current_app
from itsdangerous import BadSignature, URLSafeSerializer

from control_plane.errors import BadRequest

# --- query-string schemas -------------------------------------------------


class CursorArgs(ma.Schema):
    limit = ma.fields.Integer(load_default=20, validate=ma.validate.Range(1, 100))
    cursor = ma.fields.String(load_default=None, validate=ma.validate.Length(max=512))


class PageArgs(ma.Schema):
    page = ma.fields.Integer(load_default=1, validate=ma.validate.Range(min=1, max=1_000_000))
    page_size = ma.fields.Integer(load_default=20, validate=ma.validate.Range(1, 100))


def offset_args(default_limit):
    class OffsetArgs(ma.Schema):
        limit = ma.fields.Integer(load_default=default_limit, validate=ma.validate.Range(1, 100))
        offset = ma.fields.Integer(load_default=0, validate=ma.validate.Range(min=0, max=10_000_000))
    return OffsetArgs


class CursorMeta(ma.Schema):
    has_more = ma.fields.Boolean(required=True)
    next_cursor = ma.fields.String(allow_none=True, required=True)
    total = ma.fields.Integer(required=True)


def cursor_page_schema(item_schema, name):
    return type(name, (ma.Schema,), {
        "data": ma.fields.List(ma.fields.Nested(item_schema), required=True),
        "pagination": ma.fields.Nested(CursorMeta, required=True),
    })


# --- cursor (keyset) ---------------------------------------------------------


def _serializer(list_name):
    return URLSafeSerializer(current_app.config["SECRET_KEY"], salt=f"berth-cursor:{list_name}")


def cursor_page(query, *, list_name, limit, cursor, newest_first, fingerprint=""):
    """A page of `query` ordered by (created_at, id).

    The cursor is signed for `list_name` and the filters (`fingerprint`), so a
    cursor made by another list, another filter, or by hand is refused (400)."""
    model = query.model
    total = query.count()
    if cursor:
        try:
            created_iso, last_id, fp = _serializer(list_name).loads(cursor)
            if fp != fingerprint:
                raise BadSignature("filters changed")
            created = datetime.datetime.fromisoformat(created_iso)
            last = uuid.UUID(last_id)
        except (BadSignature, ValueError, TypeError):
            raise BadRequest("The cursor was not produced by this list.",
                             code="invalid_cursor") from None
        after = (model.created_at < created) if newest_first else (model.created_at > created)
        tie = (model.id < last) if newest_first else (model.id > last)
        query = query.where(after | ((model.created_at == created) & tie))
    order = [model.created_at.desc(), model.id.desc()] if newest_first else \
        [model.created_at.asc(), model.id.asc()]
    rows = list(query.order_by(*order).limit(limit + 1))
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if has_more:
        last_row = rows[-1]
        next_cursor = _serializer(list_name).dumps(
            [last_row.created_at.isoformat(), last_row.id.hex, fingerprint])
    return rows, {"has_more": has_more, "next_cursor": next_cursor, "total": total}


# --- page and offset ---------------------------------------------------------


def page_page(query, *, page, page_size):
    total = query.count()
    items = list(query.paginate(page, page_size))
    return {"items": items, "total": total, "page": page, "page_size": page_size,
            "total_pages": -(-total // page_size)}


def offset_page(query, *, limit, offset):
    total = query.count()
    items = list(query.limit(limit).offset(offset))
    return items, total
