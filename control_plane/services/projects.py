"""Projects: the top-level container of an organization's environments."""

from peewee import fn

from control_plane import clock
from control_plane.db import database
from control_plane.errors import BadRequest, Conflict, Forbidden, NotFound
from control_plane.models import Environment, Project, Server
from control_plane.services.scope import projects_for, require_org_scope

BUSY_STATUSES = ("running", "deploying")


def environment_counts(project_ids):
    """Active environments per project, in one grouped query."""
    if not project_ids:
        return {}
    rows = (Environment.select(Environment.project, fn.COUNT(Environment.id).alias("n"))
            .where(Environment.project.in_(project_ids), Environment.is_active)
            .group_by(Environment.project).tuples())
    return dict(rows)


def with_counts(projects):
    counts = environment_counts([p.id for p in projects])
    for p in projects:
        p.environment_count = counts.get(p.id, 0)
    return projects


def get_project(key, project_id):
    project = projects_for(key).where(Project.id == project_id).first()
    if project is None:
        raise NotFound("Project not found.")
    return with_counts([project])[0]


def _usable_server(key, server_id):
    server = Server.get_or_none(
        (Server.id == server_id) & Server.deleted_at.is_null()
        & ((Server.organization == key.organization_id) | Server.organization.is_null()))
    if server is None:
        raise NotFound("Server not found.")
    return server


def create_project(key, *, name, server_id, git_repo_url=None, default_branch="main",
                   erp_version=None):
    require_org_scope(key, "Creating projects needs an organization-scoped key.")
    with database.atomic():
        server = _usable_server(key, server_id)
        project = Project.create(
            organization=key.organization_id, name=name.strip(), server=server,
            git_repo_url=git_repo_url, default_branch=default_branch, erp_version=erp_version)
    project.environment_count = 0
    return project


def update_project(key, project_id, changes):
    """`changes` holds only the fields the client sent."""
    with database.atomic():
        project = get_project(key, project_id)
        for field in ("name", "default_branch", "git_repo_url"):
            if field in changes:
                value = changes[field]
                setattr(project, field, value.strip() if field == "name" else value)
        project.updated_at = clock.now()
        project.save()
    return project


def delete_project(key, project_id, confirm):
    """Soft delete; refused while an environment runs or deploys."""
    if key.project_scoped:
        raise Forbidden("Project-scoped keys cannot delete projects.", code="project_scoped_key")
    with database.atomic():
        project = get_project(key, project_id)
        if confirm != "true":
            raise BadRequest("Send the header 'X-Confirm-Delete: true' to delete a project.",
                             code="confirm_required")
        busy = (Environment.select().where(Environment.project == project, Environment.is_active,
                                           Environment.status.in_(BUSY_STATUSES)).count())
        if busy:
            raise Conflict(f"{busy} environment(s) are running or deploying; stop them first.",
                           code="environments_running")
        now = clock.now()
        Project.update(deleted_at=now, updated_at=now).where(Project.id == project.id).execute()
        # Its remaining (stopped, failed...) environments go with it.
        Environment.update(is_active=False, updated_at=now).where(
            Environment.project == project.id).execute()
