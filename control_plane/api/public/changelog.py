"""Release notes: /changelog (any key)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.fields import Schema
from control_plane.api.pagination import offset_args
from control_plane.api.smorest import Blueprint
from control_plane.infra.pagination import offset_page
from control_plane.services.support import releases as svc

blp = Blueprint("changelog", __name__, description="Release notes")


class VersionField(ma.fields.String):
    def _deserialize(self, value, attr, data, **kwargs):
        try:
            return svc.parse_version(super()._deserialize(value, attr, data, **kwargs))
        except ValueError as exc:
            raise ma.ValidationError(str(exc)) from None


class ChangelogArgs(offset_args(20)):
    since_version = VersionField(load_default=None, metadata={
        "description": "Only releases newer than this `<major>.<minor>.<patch>`",
        "pattern": svc.VERSION_RE.pattern})
    since_date = ma.fields.Date(load_default=None, metadata={
        "description": "Only releases on or after this `YYYY-MM-DD`"})


class ReleaseSchema(Schema):
    version = ma.fields.String(required=True)
    date = ma.fields.Date(required=True)
    title = ma.fields.String(required=True)
    highlights = ma.fields.List(ma.fields.String(), required=True)
    categories = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.List(ma.fields.String()),
                                required=True)


class ChangelogPage(ma.Schema):
    entries = ma.fields.List(ma.fields.Nested(ReleaseSchema), required=True)
    total = ma.fields.Integer(required=True)
    limit = ma.fields.Integer(required=True)
    offset = ma.fields.Integer(required=True)


@blp.route("/changelog")
class Changelog(MethodView):
    @blp.arguments(ChangelogArgs, location="query")
    @blp.response(200, ChangelogPage)
    def get(self, args):
        """Platform releases, newest first."""
        entries, total = offset_page(svc.releases(args["since_version"], args["since_date"]),
                                     limit=args["limit"], offset=args["offset"])
        return {"entries": entries, "total": total, "limit": args["limit"],
                "offset": args["offset"]}
