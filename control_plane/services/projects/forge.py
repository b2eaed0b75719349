"""Where a project's builds report commit statuses: its forge (github, gitlab or gitea),
the forge's API base URL (default: the public one; a self-hosted GitLab or Gitea names
its own) and a token allowed to set commit statuses, sealed and never shown again
(services/webhooks/commit_statuses.py sends them)."""

from control_plane.infra import clock, secretbox
from control_plane.infra.db import database
from control_plane.models import Project
from control_plane.models.project import FORGE_DEFAULT_API, FORGE_TOKEN_PURPOSE
from control_plane.services import audit
from control_plane.services.projects.projects import get_project

PROVIDERS = tuple(FORGE_DEFAULT_API)


def shown(project):
    return {"project_id": project.id, "provider": project.forge_provider,
            "api_url": project.forge_api_url or FORGE_DEFAULT_API.get(project.forge_provider),
            "token_set": bool(project.forge_token)}


def get_forge(actor, project_id):
    get_project(actor, project_id)  # in scope, or 404
    return shown(Project.get_by_id(project_id))


def set_forge(actor, project_id, *, provider, token, api_url=None):
    """PUT: the forge and a new token (the old one is replaced)."""
    with database.atomic():
        get_project(actor, project_id)
        Project.update(forge_provider=provider, forge_api_url=api_url,
                       forge_token=secretbox.seal(token, FORGE_TOKEN_PURPOSE),
                       updated_at=clock.now()).where(Project.id == project_id).execute()
        audit.record(actor.organization_id, "project.forge_set", "project", project_id,
                     {"provider": provider, "api_url": api_url})
        return get_forge(actor, project_id)


def clear_forge(actor, project_id):
    with database.atomic():
        get_project(actor, project_id)
        Project.update(forge_provider=None, forge_api_url=None, forge_token=None,
                       updated_at=clock.now()).where(Project.id == project_id).execute()
        audit.record(actor.organization_id, "project.forge_clear", "project", project_id, {})
