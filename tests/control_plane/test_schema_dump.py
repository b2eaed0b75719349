"""The output Schema's fast dumps (control_plane.api.fields.Schema) give what
marshmallow's own Schema gives for the same fields, key order included: dict
rows column by column (copied whole when their keys are the output's), a row
lacking a field, model objects, mixed types."""

import datetime as dt
import json
import uuid

import marshmallow as ma

from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.public.projects import ProjectPage, ProjectSchema

FIELDS = {
    "id": ma.fields.UUID(required=True),
    "name": ma.fields.String(required=True),
    "note": ma.fields.String(allow_none=True),
    "count": ma.fields.Integer(required=True),
    "ratio": ma.fields.Float(allow_none=True),
    "on": ma.fields.Boolean(dump_default=False),
    "label": ma.fields.String(attribute="name_attr", data_key="shownName"),
    "created_at": UTCDateTime(required=True),
}
Fast = Schema.from_dict(FIELDS, name="Fast")
Plain = ma.Schema.from_dict(FIELDS, name="Plain")  # marshmallow's own loop, same fields
T0 = dt.datetime(2026, 11, 23, 19, 0, 0, 123456)


def row(i, **changes):
    base = {"id": str(uuid.UUID(int=i)), "name": f"p{i}", "note": None, "count": i,
            "ratio": None, "on": True, "name_attr": f"l{i}", "created_at": T0 + dt.timedelta(i)}
    return {**base, **changes}


def same(rows):
    fast, plain = Fast(many=True).dump(rows), Plain(many=True).dump(rows)
    assert json.dumps(fast) == json.dumps(plain)  # values and key order


def test_uniform_rows():
    same([row(i) for i in range(20)])


def test_columns_of_mixed_types_convert_only_what_needs_it():
    same([row(0, id=uuid.UUID(int=7), count=True, ratio=2), row(1, note="n", ratio=0.5),
          row(2, name=12, created_at=T0.replace(tzinfo=dt.UTC))])


def test_a_row_lacking_a_field_takes_its_dump_default_or_leaves_it_out():
    rows = [row(0), {k: v for k, v in row(1).items() if k not in ("on", "note")}]
    same(rows)
    assert "note" not in Fast(many=True).dump(rows)[1]


def test_objects_generators_and_empty_lists():
    class Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    same([Obj(**row(0)), row(1)])
    assert Fast(many=True).dump(row(i) for i in range(3)) == Plain(many=True).dump(
        [row(i) for i in range(3)])
    assert Fast(many=True).dump([]) == []


def test_the_projects_page_as_marshmallow_writes_it():
    rows = [{"id": str(uuid.UUID(int=i)), "name": f"p{i}", "erp_version": None,
             "git_repo_url": "https://git.example/x" if i % 2 else None,
             "default_branch": "main", "environment_count": i, "server_id": None,
             "created_at": T0 + dt.timedelta(seconds=i)} for i in range(20)]
    page = {"data": rows, "pagination": {"has_more": False, "next_cursor": None, "total": 20}}
    item = ma.Schema.from_dict(dict(ProjectSchema._declared_fields), name="PlainProject")
    plain = ma.Schema.from_dict({"data": ma.fields.Nested(item, many=True),
                                 "pagination": ProjectPage._declared_fields["pagination"]})
    assert json.dumps(ProjectPage().dump(page)) == json.dumps(plain().dump(page))
    assert rows[0]["created_at"] == T0  # the rows given are left as they were
