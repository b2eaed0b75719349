"""Projects: /projects and /projects/{project_id}."""

import marshmallow as ma
from flask import request
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor, key_checked_by_page
from control_plane.api.fields import (
    Branch,
    Name,
    RedactedUrl,
    RepoUrl,
    Schema,
    UTCDateTime,
    shown,
)
from control_plane.api.idempotency import idempotent
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import (
    REPLAY_DESCRIPTION,
    Blueprint,
    confirm_delete_header,
)
from control_plane.services.projects import projects as svc

blp = Blueprint("projects", __name__, description="Projects")


class ProjectSchema(Schema):
    id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    erp_version = ma.fields.String(allow_none=True)
    git_repo_url = RedactedUrl(allow_none=True, metadata={
        "description": "Shown without credentials (a URL stored before they were refused "
                       "may hold some)."})
    default_branch = ma.fields.String(allow_none=True)
    environment_count = ma.fields.Integer(required=True)
    server_id = ma.fields.UUID(allow_none=True)
    created_at = UTCDateTime(required=True)


ErpVersion = ma.fields.String(validate=ma.validate.Regexp(
    r"^\d{1,4}\.\d{1,4}$", error="Must be <major>.<minor>, e.g. 17.0."), allow_none=True)


def GitRepoUrl():  # noqa: N802
    return RepoUrl(allow_none=True, metadata={"description": (
        "An https URL of a Git repository, at most 2048 characters, without credentials "
        "(a user name, password or token in the URL is refused: give the server access "
        "to the repository instead).")})


class ProjectCreateSchema(ma.Schema):
    name = Name(required=True)
    server_id = ma.fields.UUID(required=True)
    git_repo_url = GitRepoUrl()
    default_branch = Branch(load_default="main")
    erp_version = ErpVersion


class ProjectUpdateSchema(ma.Schema):
    name = Name()
    default_branch = Branch()
    git_repo_url = GitRepoUrl()


ProjectPage = cursor_page_schema(ProjectSchema, "ProjectPage")
SHOWN = shown(ProjectSchema)  # a row's JSON depends on the row alone


@blp.route("/projects")
class Projects(MethodView):
    @key_checked_by_page
    @blp.arguments(CursorArgs, location="query")
    @blp.response(200, ProjectPage)
    def get(self, args):
        """List the active projects the key can see (oldest first)."""
        rows, meta = svc.list_projects(current_actor(), shown=SHOWN, **args)
        return {"data": rows, "pagination": meta}

    @idempotent
    @blp.arguments(ProjectCreateSchema)
    @blp.alt_response(202, schema="TaskAccepted", description=REPLAY_DESCRIPTION)
    @blp.response(201, ProjectSchema)
    def post(self, body):
        """Create a project (full-access, organization-scoped key). Accepts `X-Idempotency-Key`."""
        return svc.create_project(current_actor(), **body)


@blp.route("/projects/<uuid:project_id>")
class ProjectById(MethodView):
    @blp.response(200, ProjectSchema)
    def get(self, project_id):
        return svc.get_project(current_actor(), project_id)

    @blp.arguments(ProjectUpdateSchema, required=False)  # no body: nothing changes
    @blp.response(200, ProjectSchema)
    def patch(self, body, project_id):
        """Change name, default branch or repository; omitted fields stay."""
        return svc.update_project(current_actor(), project_id, body)

    @blp.doc(**confirm_delete_header("delete the project"))
    @blp.response(204)
    def delete(self, project_id):
        """Soft-delete a project (full-access, organization-scoped key; `X-Confirm-Delete: true`)."""
        svc.delete_project(current_actor(), project_id, request.headers.get("X-Confirm-Delete"),
                           berth=current_berth())
