"""Builds of pushes (a `test` automation rule): /projects/{id}/builds and
/builds/{id} (read-only keys welcome)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint
from control_plane.services.automation import builds as svc

blp = Blueprint("builds", __name__, description=(
    "A build is a push's tests: a `test` automation rule deploys the pushed commit into a "
    "throwaway environment (an empty database, or a neutralised copy of a source's newest "
    "backup), installs or updates the modules the push changed and those depending on "
    "them, and runs their tests. Events: `build.started`, `build.completed`, "
    "`build.failed`."))


class CountsSchema(Schema):
    tests = ma.fields.Integer(required=True)
    passed = ma.fields.Integer(required=True)
    failed = ma.fields.Integer(required=True)
    error = ma.fields.Integer(required=True)
    skipped = ma.fields.Integer(required=True)


class TestOutcomeSchema(Schema):
    name = ma.fields.String(required=True, metadata={"description": "`Class.method`"})
    module = ma.fields.String(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": ["passed", "failed", "error", "skipped"]})
    seconds = ma.fields.Float(required=True, allow_none=True, metadata={
        "description": "From the test's start to the log's next line"})
    failure = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "The traceback of a failure or error; a skip's reason"})


class BuildSchema(Schema):
    id = ma.fields.UUID(required=True)
    project_id = ma.fields.UUID(attribute="project", required=True)
    rule_id = ma.fields.UUID(required=True, allow_none=True)
    branch = ma.fields.String(required=True)
    commit = ma.fields.String(required=True, allow_none=True)
    base_commit = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "What the changed modules were found against: the push's previous head"})
    status = ma.fields.String(required=True, metadata={"enum": list(svc.STATUSES), "description": (
        "`queued` (its server runs another build), `running`, `passed`, `failed` (a test "
        "failed), `error` (the tests could not run) or `cancelled` (a newer push)")})
    stage = ma.fields.String(required=True, allow_none=True, metadata={
        "enum": ["create", "copy", "test"]})
    environment_id = ma.fields.UUID(required=True, allow_none=True)
    modules = ma.fields.List(ma.fields.String(), required=True, allow_none=True, metadata={
        "description": "The modules tested: those the push changed and those depending on them"})
    counts = ma.fields.Nested(CountsSchema, required=True, allow_none=True)
    reason = ma.fields.String(required=True, allow_none=True)
    created_at = UTCDateTime(required=True)
    started_at = UTCDateTime(required=True, allow_none=True)
    finished_at = UTCDateTime(required=True, allow_none=True)
    duration_seconds = ma.fields.Method("duration", required=True, allow_none=True,
                                        metadata={"type": "number"})

    def duration(self, build):
        start, end = build.get("started_at"), build.get("finished_at")
        return round((end - start).total_seconds(), 3) if start and end else None


class BuildDetailSchema(BuildSchema):
    tests = ma.fields.List(ma.fields.Nested(TestOutcomeSchema), required=True, allow_none=True,
                           metadata={"description": "Failures and errors first"})
    log = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "The ERP's output of the test run (at most 1,000,000 characters)"})


class BuildArgs(CursorArgs):
    branch = ma.fields.String(validate=ma.validate.Length(1, 255))


BuildPage = cursor_page_schema(BuildSchema, "BuildPage")


@blp.route("/projects/<uuid:project_id>/builds")
class Builds(MethodView):
    @blp.arguments(BuildArgs, location="query")
    @blp.response(200, BuildPage)
    def get(self, args, project_id):
        """A project's builds, newest first (of one `branch` when given)."""
        rows, meta = svc.list_builds(current_actor(), project_id, **args)
        return {"data": rows, "pagination": meta}


@blp.route("/builds/<uuid:build_id>")
class BuildById(MethodView):
    @blp.response(200, BuildDetailSchema)
    def get(self, build_id):
        """A build with each test's outcome and the log."""
        return svc.get_build(current_actor(), build_id)
