"""Who may touch which environment: an environment resolved for an API key (the
public API, in the key's scope) or for a user with a permission (/api/v1): an
active one, or a destroyed one (which may be deployed again); and the one
writer of an environment's own settings.

`lock` holds the environment's row until the transaction ends, so two requests
cannot both find it idle; `actions` then takes the resolved environment."""

from control_plane import clock, states
from control_plane.db import for_update
from control_plane.errors import NotFound
from control_plane.models import Deployment, Environment, Project
from control_plane.services import audit
from control_plane.services.accounts import users


def environment_for_key(key, environment_id, *, lock=False):
    """An environment in the key's scope (404 otherwise): an active one, or a
    destroyed one (shown `pending`, as the spec has it after a destroy; it may
    be deployed again). A deleted one is gone."""
    query = _visible().where(Environment.id == environment_id,
                             Project.organization == key.organization_id)
    if key.project_scoped:
        query = query.where(Project.id == key.project_id)
    return _one(query, lock)


def _visible():
    """Environments both APIs know: active ones, and destroyed ones (inactive),
    which may be deployed again. Not those deleted through the public API, nor
    any of a deleted project."""
    return (Environment.select(Environment, Project).join(Project)
            .where(Project.deleted_at.is_null(),
                   Environment.is_active
                   | (Environment.status == states.EnvironmentStatus.DESTROYED)))


def environment_for_user(user, environment_id, permission, *, lock=False):
    """An environment of the user's organization (404 otherwise), the permission
    checked (403)."""
    env = _one(_visible().where(Environment.id == environment_id), lock)
    users.require(user, permission, env.project.organization_id)
    return env


def environment_for_operator(environment_id, *, lock=False):
    """`berth admin …`: any active environment of a live project (404 otherwise)."""
    return _one(Environment.select(Environment, Project).join(Project)
                .where(Environment.id == environment_id, Environment.is_active,
                       Project.deleted_at.is_null()), lock)


def _one(query, lock):
    env = (for_update(query, of=Environment) if lock else query).first()
    if env is None:
        raise NotFound("Environment not found.")
    return env


def deployment_for_user(user, deployment_id, permission=None):
    """A deployment of a live project of the user's organization (404), the
    permission checked (403)."""
    d = (Deployment.select(Deployment, Project).join(Project)
         .where(Deployment.id == deployment_id, Project.deleted_at.is_null()).first())
    if d is None:
        raise NotFound("Deployment not found.")
    users.require(user, permission, d.project.organization_id)
    return d


def deployment_for_change(user, deployment_id, permission):
    """(deployment, its environment locked); the deployment read again under the lock."""
    d = deployment_for_user(user, deployment_id, permission)
    try:
        env = environment_for_user(user, d.environment_id, permission, lock=True)
    except NotFound:
        raise NotFound("Deployment not found.") from None
    return Deployment.get_by_id(d.id), env


def update_environment(env, fields):
    """The environment's own settings (name, branch, auto_deploy), only those
    given; nothing is deployed now, and a task already queued keeps the branch it
    was queued with."""
    if fields:
        audit.record(env.project.organization_id, "environment.update", "environment", env.id,
                     fields)
        fields = {**fields, "updated_at": clock.now()}
        Environment.update(**fields).where(Environment.id == env.id).execute()
        for name, value in fields.items():
            setattr(env, name, value)
    return env
