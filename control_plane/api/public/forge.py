"""/projects/{id}/forge: where the project's builds report commit statuses."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema
from control_plane.api.smorest import Blueprint
from control_plane.inputs.url_forms import WEBHOOK_URL_PATTERN
from control_plane.services.projects import forge as svc

blp = Blueprint("forge", __name__, description=(
    "A project's forge: each build's result goes to its commit there, as a commit status "
    "(`berth/build`) linking to the build."))


class ForgeSchema(Schema):
    project_id = ma.fields.UUID(required=True)
    provider = ma.fields.String(required=True, allow_none=True, metadata={
        "enum": list(svc.PROVIDERS), "description": "null: builds report nowhere"})
    api_url = ma.fields.String(required=True, allow_none=True)
    token_set = ma.fields.Boolean(required=True, metadata={
        "description": "A token is stored (sealed; it is never shown)"})


class ForgeBody(ma.Schema):
    provider = ma.fields.String(required=True, validate=ma.validate.OneOf(
        svc.PROVIDERS, error="One of: github, gitlab, gitea."))
    token = ma.fields.String(required=True, validate=ma.validate.Length(1, 512), metadata={
        "description": "A token allowed to set commit statuses (GitHub: `repo:status`; "
                       "GitLab: `api`; Gitea: `write:repository`)", "writeOnly": True})
    api_url = ma.fields.String(validate=[ma.validate.Length(max=512), ma.validate.Regexp(
        WEBHOOK_URL_PATTERN, error="An https URL.")], metadata={
        "description": "The forge's API base URL: a self-hosted GitLab "
                       "(`https://git.example.com/api/v4`) or Gitea "
                       "(`https://git.example.com/api/v1`); default the public one"})


@blp.route("/projects/<uuid:project_id>/forge")
class Forge(MethodView):
    @blp.response(200, ForgeSchema)
    def get(self, project_id):
        """Where the project's builds report (the token is never shown)."""
        return svc.get_forge(current_actor(), project_id)

    @blp.arguments(ForgeBody)
    @blp.response(200, ForgeSchema)
    def put(self, body, project_id):
        """Report builds to this forge, with this token (full-access key)."""
        return svc.set_forge(current_actor(), project_id, **body)

    @blp.response(204)
    def delete(self, project_id):
        """Report builds nowhere; the token is forgotten (full-access key)."""
        svc.clear_forge(current_actor(), project_id)
