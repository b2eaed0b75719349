"""What an API key can see: its organization, narrowed to one project for
project-scoped keys. Anything else answers 404, as if it did not exist."""

from control_plane.errors import Forbidden
from control_plane.models import Project


def projects_for(key):
    query = Project.select().where(Project.organization == key.organization_id,
                                   Project.deleted_at.is_null())
    if key.project_scoped:
        query = query.where(Project.id == key.project_id)
    return query


def require_org_scope(key, message="This needs an organization-scoped key."):
    if key.project_scoped:
        raise Forbidden(message, code="org_scope_required")
