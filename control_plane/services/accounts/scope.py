"""What an API key can see: its organization, narrowed to one project for
project-scoped keys. Anything else answers 404, as if it did not exist."""

from control_plane.errors import OrgScopeRequired
from control_plane.models import Project


def projects_for(key):
    query = Project.select().where(Project.organization == key.organization_id,
                                   Project.deleted_at.is_null())
    if key.project_scoped:
        query = query.where(Project.id == key.project_id)
    return query


def require_org_scope(key, message="This needs an organization-scoped key."):
    if key.project_scoped:
        raise OrgScopeRequired(message)


def scoped_page(listing, key, *, limit, cursor):
    """A page of `listing` (a CursorList whose query takes the organization and,
    in its "project" shape, the project) as the key may see it."""
    if key.project_scoped:
        return listing.page(key.organization_id.hex, key.project_id.hex, shape=("project",),
                            limit=limit, cursor=cursor)
    return listing.page(key.organization_id.hex, limit=limit, cursor=cursor)
