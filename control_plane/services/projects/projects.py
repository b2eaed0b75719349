"""Projects: the top-level container of an organization's environments."""

from peewee import fn

from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.infra.pagination import CursorList
from control_plane.models import Environment, Project, Server
from control_plane.services import audit
from control_plane.services.accounts.scope import require_org_scope, scoped_page
from control_plane.services.tasks import engine
from control_plane.vocabulary.errors import (
    ConfirmRequired,
    EnvironmentsRunning,
    NotFound,
    ProjectScopedKey,
)
from control_plane.vocabulary.states import EnvironmentStatus
from protocol.kinds import TaskKind

BUSY_STATUSES = (EnvironmentStatus.RUNNING, EnvironmentStatus.DEPLOYING)


def _listed(org, *project, shape):
    """Active projects of an organization (or its one project, for a
    project-scoped key), each with its count of active environments."""
    active_envs = (Environment.select(fn.COUNT(Environment.id))
                   .where(Environment.project == Project.id, Environment.is_active))
    # In the order of the API's ProjectSchema: a list page's rows are then dumped
    # by copying them (api.fields.Schema).
    query = (Project.select(Project.id, Project.name, Project.erp_version, Project.git_repo_url,
                            Project.default_branch, active_envs.alias("environment_count"),
                            Project.server.alias("server_id"), Project.created_at)
             .where(Project.organization == org, Project.deleted_at.is_null()))
    return query.where(Project.id == project[0]) if shape == ("project",) else query


PROJECTS = CursorList("projects", Project, _listed, newest_first=False)


def list_projects(actor, *, limit, cursor, shown=None):
    return scoped_page(PROJECTS, actor, limit=limit, cursor=cursor, shown=shown)


def get_project(actor, project_id):
    scope = ("project",) if actor.project_scoped else ()
    project = _listed(actor.organization_id, actor.project_id, shape=scope).where(
        Project.id == project_id).dicts().first()
    if project is None:
        raise NotFound("Project not found.")
    return project


def _usable_server(actor, server_id):
    server = Server.get_or_none(
        (Server.id == server_id) & Server.deleted_at.is_null()
        & ((Server.organization == actor.organization_id) | Server.organization.is_null()))
    if server is None:
        raise NotFound("Server not found.")
    return server


def create_project(actor, *, name, server_id, git_repo_url=None, default_branch="main",
                   erp_version=None):
    require_org_scope(actor, "Creating projects needs an organization-scoped actor.")
    with database.atomic():
        server = _usable_server(actor, server_id)
        project = Project.create(
            organization=actor.organization_id, name=name.strip(), server=server,
            git_repo_url=git_repo_url, default_branch=default_branch, erp_version=erp_version)
        audit.record(actor.organization_id, "project.create", "project", project.id, {
            "name": project.name, "server_id": server.id, "git_repo_url": git_repo_url,
            "default_branch": default_branch, "erp_version": erp_version})
        return get_project(actor, project.id)


def update_project(actor, project_id, changes):
    """`changes` holds only the fields the client sent."""
    with database.atomic():
        get_project(actor, project_id)  # in scope, or 404
        fields = {f: changes[f] for f in ("name", "default_branch", "git_repo_url") if f in changes}
        if "name" in fields:
            fields["name"] = fields["name"].strip()
        Project.update(updated_at=clock.now(), **fields).where(Project.id == project_id).execute()
        audit.record(actor.organization_id, "project.update", "project", project_id, fields)
        return get_project(actor, project_id)


def delete_project(actor, project_id, confirm, *, berth):
    """Soft delete; refused while an environment runs or deploys, or has a task
    in progress. Its other environments (stopped, failed, destroyed...) are
    deleted as the public API deletes one: a `delete` task each removes its
    containers, database volume, network and directory from the server (their
    backups stay, as retention keeps those of removed environments). They leave
    the lists at once; `environment.deleted` is sent as each removal completes."""
    if actor.project_scoped:
        raise ProjectScopedKey("Project-scoped keys cannot delete projects.")
    with database.atomic():
        project = get_project(actor, project_id)
        if confirm != "true":
            raise ConfirmRequired("Send the header 'X-Confirm-Delete: true' to delete a project.")
        remaining = list(for_update(
            Environment.select(Environment, Project).join(Project)
            .where(Environment.project == project["id"],
                   Environment.is_active | (Environment.status == EnvironmentStatus.DESTROYED)),
            of=Environment))
        busy = [e for e in remaining if e.is_active and e.status in BUSY_STATUSES]
        if busy:
            raise EnvironmentsRunning(f"{len(busy)} environment(s) are running or deploying; "
                                      "stop them first.")
        if any(engine.in_progress(e.id) for e in remaining):
            raise EnvironmentsRunning("An environment of the project has a task in progress; "
                                      "wait for it to end.")
        now = clock.now()
        Project.update(deleted_at=now, updated_at=now).where(Project.id == project_id).execute()
        audit.record(actor.organization_id, "project.delete", "project", project_id)
        Environment.update(is_active=False, updated_at=now).where(
            Environment.project == project_id).execute()
        for env in remaining:
            engine.start(env, TaskKind.DELETE, berth=berth, actor=actor)
