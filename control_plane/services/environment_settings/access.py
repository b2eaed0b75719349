"""Who may touch which environment or deployment: resolved for an actor
(services/accounts/actors.py) in one way, whoever asks: an active environment or
a destroyed one (which may be deployed again) of a live project, in the actor's
organization (an operator's: any) and project (a project-scoped key's), then
the actor's permission (403). Another organization's is 404, as if it did not
exist. Also the one writer of an environment's own settings.

`lock` holds the environment's row until the transaction ends, so two requests
cannot both find it idle; `actions` then takes the resolved environment."""

from control_plane.infra import clock
from control_plane.infra.db import for_update
from control_plane.models import Deployment, Environment, Project
from control_plane.services import audit
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import NotFound

# A destroyed environment is inactive, and so is one being destroyed (or deleted)
# again from there: both are still there to see.
SEEN_INACTIVE = (states.EnvironmentStatus.DESTROYED, states.EnvironmentStatus.DESTROYING)


def _visible():
    """Environments the APIs know: active ones, and destroyed ones (inactive),
    which may be deployed again. Not those deleted through the public API, nor
    any of a deleted project."""
    return (Environment.select(Environment, Project).join(Project)
            .where(Project.deleted_at.is_null(),
                   Environment.is_active | Environment.status.in_(SEEN_INACTIVE)))


def _scoped(query, actor):
    if actor.organization_id is not None:
        query = query.where(Project.organization == actor.organization_id)
    if actor.project_scoped:
        query = query.where(Project.id == actor.project_id)
    return query


def environment(actor, environment_id, permission=None, *, lock=False):
    """An environment the actor sees (404 otherwise), the permission checked (403)."""
    env = _one(_scoped(_visible().where(Environment.id == environment_id), actor), lock)
    actor.require(permission)
    return env


def _one(query, lock):
    env = (for_update(query, of=Environment) if lock else query).first()
    if env is None:
        raise NotFound("Environment not found.")
    return env


def deployment(actor, deployment_id, permission=None):
    """A deployment (task) of a live project the actor sees (404), the permission
    checked (403)."""
    d = _scoped(Deployment.select(Deployment, Project).join(Project)
                .where(Deployment.id == deployment_id, Project.deleted_at.is_null()),
                actor).first()
    if d is None:
        raise NotFound("Deployment not found.")
    actor.require(permission)
    return d


def deployment_to_change(actor, deployment_id, permission):
    """(deployment, its environment locked); the deployment read again under the lock."""
    d = deployment(actor, deployment_id, permission)
    try:
        env = environment(actor, d.environment_id, permission, lock=True)
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
