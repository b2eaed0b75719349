"""What an actor can see (services/accounts/actors.py): its organization (an
operator's: every one), narrowed to one project for project-scoped keys.
Anything else answers 404, as if it did not exist."""

from control_plane.models import Project
from control_plane.services.accounts import keys
from control_plane.vocabulary.errors import OrgScopeRequired


def projects_for(actor):
    query = Project.select().where(Project.deleted_at.is_null())
    if actor.organization_id is not None:
        query = query.where(Project.organization == actor.organization_id)
    if actor.project_scoped:
        query = query.where(Project.id == actor.project_id)
    return query


def require_org_scope(actor, message="This needs an organization-scoped key."):
    if actor.project_scoped:
        raise OrgScopeRequired(message)


def scoped_page(listing, actor, *, limit, cursor, shown=None):
    """A page of `listing` (a CursorList whose query takes the organization and,
    in its "project" shape, the project) as the actor may see it; `shown`: see
    CursorList.page. When the request deferred its key check (keys.KeyCache), the
    page's statement re-reads the key's row as well."""
    params, shape = ((actor.organization_id.hex, actor.project_id.hex), ("project",)) \
        if actor.project_scoped else ((actor.organization_id.hex,), ())
    digest = keys.unchecked_digest()
    also = (keys.fingerprint_query, digest, keys.settle) if digest is not None else None
    return listing.page(*params, shape=shape, limit=limit, cursor=cursor, also=also,
                        shown=shown)
