"""What an API key can see: its organization, narrowed to one project for
project-scoped keys. Anything else answers 404, as if it did not exist."""

from control_plane.errors import OrgScopeRequired
from control_plane.models import Project
from control_plane.services.accounts import keys


def projects_for(key):
    query = Project.select().where(Project.organization == key.organization_id,
                                   Project.deleted_at.is_null())
    if key.project_scoped:
        query = query.where(Project.id == key.project_id)
    return query


def require_org_scope(key, message="This needs an organization-scoped key."):
    if key.project_scoped:
        raise OrgScopeRequired(message)


def scoped_page(listing, key, *, limit, cursor, shown=None):
    """A page of `listing` (a CursorList whose query takes the organization and,
    in its "project" shape, the project) as the key may see it; `shown`: see
    CursorList.page. When the request deferred its key check (keys.KeyCache), the
    page's statement re-reads the key's row as well."""
    params, shape = ((key.organization_id.hex, key.project_id.hex), ("project",)) \
        if key.project_scoped else ((key.organization_id.hex,), ())
    digest = keys.unchecked_digest()
    also = (keys.fingerprint_query, digest, keys.settle) if digest is not None else None
    return listing.page(*params, shape=shape, limit=limit, cursor=cursor, also=also,
                        shown=shown)
