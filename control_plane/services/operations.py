"""Deployment operations (the /api/v1 surface): retry, cancel, rollback, deploy,
manual deployments, the deployment list and per-environment settings.

Each change is one function and one transaction: the checks, the deployment
record, its durable agent command and its events; the gateway is woken after
the commit. Cancel and destroy live in services/cancel.py and services/destroy.py.

Order of the checks, everywhere: 404 (missing or another organization), 403
(permission), 400 (the deployment's status), 409 (one deployment at a time,
or a move the environment's table refuses), 429 (per-organization limits).
A refused request changes nothing and uses no rate-limit slot."""

from control_plane import clock, events, states
from control_plane.db import database, for_update
from control_plane.errors import BadRequest, Conflict, NotFound
from control_plane.models import Deployment, Environment, Project
from control_plane.pagination import CursorList
from control_plane.services import deployments, users

DEPLOY, CANCEL = "project.environments.deploy", "project.deployments.cancel"
CODE_KINDS = ("deploy", "redeploy")  # the kinds that put code on the server
STATUSES = ("pending", "queued", "building", "deploying", "running", "success", "failed",
            "cancelled", "rolled_back", "destroyed")


# --- lookups ------------------------------------------------------------------

def _visible():
    """Environments this surface knows: active ones, and destroyed ones (inactive,
    `pending`), which may be deployed again. Not those deleted through the public
    API, nor any of a deleted project."""
    return (Environment.select(Environment, Project).join(Project)
            .where(Project.deleted_at.is_null(),
                   Environment.is_active | (Environment.status == "pending")))


def environment(user, environment_id, permission, *, lock=False):
    """An environment of the user's organization (404 otherwise), the permission
    checked (403); `lock` holds its row until the transaction ends."""
    query = _visible().where(Environment.id == environment_id)
    env = (for_update(query, of=Environment) if lock else query).first()
    if env is None:
        raise NotFound("Environment not found.")
    users.require(user, permission, env.project.organization_id)
    return env


def deployment_for_change(user, deployment_id, permission):
    """(deployment, its environment locked); read again under the lock."""
    d = (Deployment.select(Deployment, Project).join(Project)
         .where(Deployment.id == deployment_id, Project.deleted_at.is_null()).first())
    if d is None:
        raise NotFound("Deployment not found.")
    users.require(user, permission, d.project.organization_id)
    try:
        env = environment(user, d.environment_id, permission, lock=True)
    except NotFound:
        raise NotFound("Deployment not found.") from None
    return Deployment.get_by_id(d.id), env


def get_deployment(user, deployment_id):
    d = (Deployment.select(Deployment, Project).join(Project)
         .where(Deployment.id == deployment_id, Project.deleted_at.is_null()).first())
    if d is None:
        raise NotFound("Deployment not found.")
    users.require(user, None, d.project.organization_id)
    return d


def rollbackable(d):
    """A rollback target: a successful deployment of code whose flag allows it.
    Reads model objects and list rows (dicts) alike."""
    get = d.get if isinstance(d, dict) else (lambda name: getattr(d, name))
    return get("status") == "success" and get("kind") in CODE_KINDS and bool(get("can_rollback"))


# --- the shared steps of every new deployment -----------------------------------

def refuse_if_busy(env):
    if deployments.in_progress(env.id):
        raise Conflict("A deployment is already pending or running for this environment.",
                       code="deployment_in_progress")


def _begin(env, kind, org_id):
    """The environment's move for a new task, as the public actions make it; a
    destroyed environment that is deployed again becomes active again."""
    _, while_running, when_done = deployments.KINDS[kind]
    if while_running:
        deployments.set_environment_status(env, while_running, org_id)
    elif env.status != when_done:
        states.check("environment", env.status, when_done)
    if not env.is_active:  # it comes back to the API: receivers see it created again
        env.is_active = True
        Environment.update(is_active=True).where(Environment.id == env.id).execute()
        events.record_created(env, org_id)


def _new(env, user, berth, *, kind="deploy", trigger="manual", retry=False, **start):
    """Inside the caller's transaction: checks, limits, the record and its command."""
    org_id = env.project.organization_id
    refuse_if_busy(env)
    _begin(env, kind, org_id)
    deployments.count_requested(berth, org_id, retry=retry)
    return deployments.start(env, env.project, berth.settings, trigger=trigger, kind=kind,
                             triggered_by=user.id, **start)


def _set_branch(env, git_branch):
    """A branch given with a deploy becomes the environment's branch."""
    if git_branch and git_branch != env.branch:
        env.branch, env.updated_at = git_branch, clock.now()
        Environment.update(branch=env.branch, updated_at=env.updated_at).where(
            Environment.id == env.id).execute()


# --- operations ---------------------------------------------------------------

def retry(user, deployment_id, berth):
    """A failed deployment again: same kind, branch, commit, image and configuration,
    next version, `extra_data.retry_of`. A retried rollback stays a rollback."""
    with database.atomic():
        d, env = deployment_for_change(user, deployment_id, DEPLOY)
        if d.status != "failed":
            raise BadRequest(f"Only a failed deployment can be retried; this one is {d.status}.",
                             code="deployment_not_failed")
        if d.kind == "destroy":
            raise BadRequest("A destroy is not retried; call destroy again.",
                             code="deployment_not_failed")
        extra = {k: v for k, v in d.extra_data.items() if k in ("rollback_to", "rollback_to_version")}
        new = _new(env, user, berth, kind=d.kind, retry=True,
                   trigger="rollback" if d.trigger == "rollback" else "manual",
                   branch=d.git_branch, commit=d.git_commit, image=d.image_tag, config=d.config,
                   rollback_from=d.rollback_from_id, extra_data={**extra, "retry_of": str(d.id)})
    deployments.wake(berth, env.server_id)
    return new


def rollback(user, deployment_id, berth):
    """Back TO a successful deployment: its commit, branch, image and configuration
    (data and schema stay as they are)."""
    with database.atomic():
        target, env = deployment_for_change(user, deployment_id, DEPLOY)
        if not rollbackable(target):
            why = (f"it is {target.status}" if target.status != "success" else
                   "it deployed no code" if target.kind not in CODE_KINDS else
                   "it is marked as not available for rollback")
            raise BadRequest(f"Cannot roll back to this deployment: {why}.",
                             code="rollback_not_allowed")
        new = _new(env, user, berth, trigger="rollback", branch=target.git_branch,
                   commit=target.git_commit, image=target.image_tag, config=target.config,
                   rollback_from=target.id,
                   extra_data={"rollback_to": str(target.id),
                               "rollback_to_version": target.version})
    deployments.wake(berth, env.server_id)
    return new


def deploy_environment(user, environment_id, *, berth, force=False, git_branch=None):
    """Returns (deployment, skipped). Without `force`, a running environment whose
    branch does not change is left alone (skipped: its latest deployment is
    returned). With `force`, always a new `redeploy`: the ERP container is
    replaced, the database and filestore are kept."""
    with database.atomic():
        env = environment(user, environment_id, DEPLOY, lock=True)
        refuse_if_busy(env)
        if (not force and env.is_active and env.status == "running"
                and git_branch in (None, env.branch)):
            latest = (Deployment.select().where(Deployment.environment == env.id)
                      .order_by(Deployment.version.desc()).first())
            return latest, True
        _set_branch(env, git_branch)
        new = _new(env, user, berth, kind="redeploy" if force else "deploy")
    deployments.wake(berth, env.server_id)
    return new, False


def create_deployment(user, *, project_id, environment_id, berth, git_branch=None):
    """POST /deployments: a `manual` deployment of the environment (its branch, or
    `git_branch`, which then becomes the environment's branch)."""
    with database.atomic():
        env = environment(user, environment_id, DEPLOY, lock=True)
        if env.project_id != project_id:
            raise NotFound("The environment is not in this project.")
        refuse_if_busy(env)
        _set_branch(env, git_branch)
        new = _new(env, user, berth)
    deployments.wake(berth, env.server_id)
    return new


def update_environment(user, project_id, environment_id, changes):
    """`auto_deploy` and `git_branch` (the next deployment's branch); omitted
    fields stay. Nothing is deployed now."""
    with database.atomic():
        env = environment(user, environment_id, DEPLOY, lock=True)
        if env.project_id != project_id:
            raise NotFound("The environment is not in this project.")
        fields = {}
        if "auto_deploy" in changes:
            fields["auto_deploy"] = changes["auto_deploy"]
        if "git_branch" in changes:
            fields["branch"] = changes["git_branch"]
        if fields:
            fields["updated_at"] = clock.now()
            Environment.update(**fields).where(Environment.id == env.id).execute()
            for name, value in fields.items():
                setattr(env, name, value)
        return env


# --- the list -----------------------------------------------------------------

def _listed(org, *filters, shape):
    query = (Deployment.select(Deployment).join(Project)
             .where(Project.organization == org, Project.deleted_at.is_null()))
    values = list(filters)
    if "project" in shape:
        query = query.where(Deployment.project == values.pop(0))
    if "status" in shape:
        query = query.where(Deployment.status == values.pop(0))
    return query


DEPLOYMENTS = CursorList("deployments", Deployment, _listed, newest_first=True)


def list_deployments(user, *, limit, cursor, project_id=None, status=None):
    """The organization's deployments, newest first (a cursor page)."""
    if project_id is not None and not Project.select().where(
            Project.id == project_id, Project.organization == user.organization_id,
            Project.deleted_at.is_null()).exists():
        raise NotFound("Project not found.")
    shape, params = [], [user.organization_id.hex]
    if project_id is not None:
        shape.append("project")
        params.append(project_id.hex)
    if status:
        shape.append("status")
        params.append(status)
    return DEPLOYMENTS.page(*params, shape=tuple(shape), limit=limit, cursor=cursor)
