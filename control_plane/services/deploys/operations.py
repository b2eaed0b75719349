"""Deployment operations (the /api/v1 surface): retry, cancel, rollback, deploy,
destroy, manual deployments, the deployment list and per-environment settings.

Each change is one transaction: the environment resolved and locked (`access`),
then the action (`deploys/actions.py`) with this surface's conflict code,
`deployment_in_progress`; the gateway is woken when it commits.

Order of the checks, everywhere: 404 (missing or another organization), 403
(permission), 400 (the deployment's status), 409 (one deployment at a time,
or a move the environment's table refuses), 429 (per-organization limits).
A refused request changes nothing and uses no rate-limit slot."""

import time

from control_plane.infra.db import database
from control_plane.infra.pagination import CursorList
from control_plane.models import Deployment, Project
from control_plane.services import audit
from control_plane.services.deploys import actions
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import DestroyFailed, DestroyTimeout, NotFound
from protocol.kinds import TaskKind

DEPLOY, CANCEL = "project.environments.deploy", "project.deployments.cancel"
CONFLICT = actions.DEPLOYMENT_IN_PROGRESS
STATUSES = tuple(status.value for status in states.DeploymentStatus)
rollbackable = actions.rollbackable
POLL_SECONDS = 0.2  # destroy's wait for the agent


def get_deployment(actor, deployment_id):
    return access.deployment(actor, deployment_id)


def _set_branch(env, git_branch):
    """A branch given with a deploy becomes the environment's branch."""
    if git_branch and git_branch != env.branch:
        access.update_environment(env, {"branch": git_branch})


def retry(actor, deployment_id, berth):
    with database.atomic():
        d, env = access.deployment_to_change(actor, deployment_id, DEPLOY)
        return actions.retry(d, env, actor, berth=berth, conflict=CONFLICT)


def rollback(actor, deployment_id, berth):
    with database.atomic():
        target, env = access.deployment_to_change(actor, deployment_id, DEPLOY)
        return actions.rollback(target, env, actor, berth=berth, conflict=CONFLICT)


def cancel(actor, deployment_id):
    """Returns `{message}`; see actions.cancel."""
    with database.atomic():
        d, env = access.deployment_to_change(actor, deployment_id, CANCEL)
        restored = actions.cancel(d, actor)
        audit.record(env.project.organization_id, "deployment.cancel", "deployment", d.id,
                     {"environment_id": env.id})
    what = f"Deployment {d.id} (version {d.version})" if d.version else f"Task {d.id} ({d.kind})"
    return {"message": f"{what} cancelled by {actor.name}; the environment is {restored}."}


def deploy_environment(actor, environment_id, *, berth, force=False, git_branch=None):
    """Returns (deployment, skipped). Without `force`, a running environment whose
    branch does not change is left alone (skipped: its latest deployment is
    returned). With `force`, always a new `redeploy`: the ERP container is
    replaced, the database and filestore are kept."""
    with database.atomic():
        env = access.environment(actor, environment_id, DEPLOY, lock=True)
        actions.refuse_if_busy(env, CONFLICT)
        if (not force and env.is_active and env.status == states.EnvironmentStatus.RUNNING
                and git_branch in (None, env.branch)):
            latest = (Deployment.select()
                      .where(Deployment.environment == env.id, engine.deployments())
                      .order_by(Deployment.version.desc()).first())
            return latest, True
        _set_branch(env, git_branch)
        return actions.act(env, TaskKind.REDEPLOY if force else TaskKind.DEPLOY, actor,
                           berth=berth, conflict=CONFLICT), False


def create_deployment(actor, *, project_id, environment_id, berth, git_branch=None):
    """POST /deployments: a `manual` deployment of the environment (its branch, or
    `git_branch`, which then becomes the environment's branch)."""
    with database.atomic():
        env = access.environment(actor, environment_id, DEPLOY, lock=True)
        if env.project_id != project_id:
            raise NotFound("The environment is not in this project.")
        actions.refuse_if_busy(env, CONFLICT)
        _set_branch(env, git_branch)
        return actions.act(env, TaskKind.DEPLOY, actor, berth=berth, conflict=CONFLICT)


def update_environment(actor, project_id, environment_id, changes):
    """`auto_deploy`, `git_branch` (the next deployment's branch),
    `auto_revert` (a failed deploy reverts), `post_deploy_checks` (`enforce` or
    `warn`) and `install_modules` (what each deploy installs when missing); omitted
    fields stay. Nothing is deployed now."""
    with database.atomic():
        env = access.environment(actor, environment_id, DEPLOY, lock=True)
        if env.project_id != project_id:
            raise NotFound("The environment is not in this project.")
        fields = {}
        if "auto_deploy" in changes:
            fields["auto_deploy"] = changes["auto_deploy"]
        if "git_branch" in changes:
            fields["branch"] = changes["git_branch"]
        if "auto_revert" in changes:
            fields["auto_revert"] = changes["auto_revert"]
        if "post_deploy_checks" in changes:
            fields["post_deploy_checks"] = changes["post_deploy_checks"]
        if "install_modules" in changes:
            fields["install_modules"] = list(dict.fromkeys(changes["install_modules"])) or None
        return access.update_environment(env, fields)


# --- destroy --------------------------------------------------------------------

def destroy(actor, environment_id, *, berth, delete_data=False):
    """DELETE /api/v1/deployments/environment/{id}/destroy: synchronous for the
    caller, durable underneath. The task is recorded and queued (actions.destroy),
    then the request waits (DESTROY_WAIT_SECONDS, default 60) for the agent's
    result. When the wait runs out the answer is 504 `destroy_timeout`; the
    command stays queued and the destroy completes when the agent answers."""
    with database.atomic():
        env = access.environment(actor, environment_id, DEPLOY, lock=True)
        d = actions.destroy(env, actor, berth=berth, conflict=CONFLICT,
                            delete_data=delete_data)
    return _await(d.id, berth.settings.get("DESTROY_WAIT_SECONDS", 60))


def _await(deployment_id, wait_seconds):
    deadline = time.monotonic() + wait_seconds
    while True:
        d = Deployment.get_by_id(deployment_id)
        if d.status == states.DeploymentStatus.DESTROYED:
            return destroyed(d)
        if d.status in states.DEPLOYMENT_TERMINAL:  # failed (by the agent, or reaped)
            raise DestroyFailed(f"The server could not destroy the environment: "
                                f"{d.error_message}", deployment_id=str(d.id))
        if time.monotonic() >= deadline:
            raise DestroyTimeout(f"The server did not finish destroying the environment within "
                                 f"{wait_seconds} s. The destroy goes on: deployment {d.id} "
                                 "becomes `destroyed` when the agent answers.",
                                 deployment_id=str(d.id))
        time.sleep(POLL_SECONDS)


def destroyed(d):
    extra = d.extra_data or {}
    return {"message": f"Environment {d.environment_id} destroyed"
                       + (" with its data." if extra.get("deleted_data") else
                          "; its directory (add-ons, filestore, logs) was kept."),
            "environment_id": d.environment_id, "deployment_id": d.id,
            "deleted_containers": int(extra.get("deleted_containers") or 0),
            "deleted_database": bool(extra.get("deleted_database")),
            "deleted_data": bool(extra.get("deleted_data"))}


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


def list_deployments(actor, *, limit, cursor, project_id=None, status=None):
    """The organization's deployments, newest first (a cursor page)."""
    if project_id is not None and not Project.select().where(
            Project.id == project_id, Project.organization == actor.organization_id,
            Project.deleted_at.is_null()).exists():
        raise NotFound("Project not found.")
    shape, params = [], [actor.organization_id.hex]
    if project_id is not None:
        shape.append("project")
        params.append(project_id.hex)
    if status:
        shape.append("status")
        params.append(status)
    return DEPLOYMENTS.page(*params, shape=tuple(shape), limit=limit, cursor=cursor)
