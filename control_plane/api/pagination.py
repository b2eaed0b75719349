"""Query-string and response schemas of the three pagination styles (the
paging itself is control_plane.infra.pagination)."""

import marshmallow as ma

from control_plane.api.fields import Schema

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


class CursorMeta(Schema):
    has_more = ma.fields.Boolean(required=True)
    next_cursor = ma.fields.String(allow_none=True, required=True)
    total = ma.fields.Integer(required=True)


def cursor_page_schema(item_schema, name):
    # api.fields.Schema, as the items': every list request dumps a page.
    return type(name, (Schema,), {
        # Nested many, not List(Nested): one dump of all rows, not one per row.
        "data": ma.fields.Nested(item_schema, many=True, required=True),
        "pagination": ma.fields.Nested(CursorMeta, required=True),
    })
