"""Destroy (DELETE /api/v1/deployments/environment/{id}/destroy): synchronous for
the caller, durable underneath.

The request records a `destroy` deployment (trigger `destroy`, `pending`), moves
the environment to `destroying` and queues the agent's `destroy` command in one
transaction, then waits (DESTROY_WAIT_SECONDS, default 60) for the agent's
result. The agent removes the ERP and database containers, the database volume,
the network and the configuration file, and the environment directory too with
`delete_data`. On success the record becomes `destroyed` and the environment
`pending`, inactive, without container references.

When the wait runs out the answer is 504 `destroy_timeout`; the command stays
queued and the destroy completes when the agent answers. A server that is not
connected when the request comes is refused (502 `server_unreachable`) and
nothing changes."""

import time

from peewee import fn

from control_plane import clock, events, states
from control_plane.db import database
from control_plane.errors import ApiError
from control_plane.models import Deployment, Environment, Project, Server
from control_plane.services import agents, deployments, operations

POLL_SECONDS = 0.2


def destroy(user, environment_id, *, berth, delete_data=False):
    with database.atomic():
        env = operations.environment(user, environment_id, operations.DEPLOY, lock=True)
        org_id = env.project.organization_id
        operations.refuse_if_busy(env)
        server = env.server_id and Server.get_or_none(Server.id == env.server_id,
                                                      Server.deleted_at.is_null())
        if env.server_id is not None and (server is None or not agents.is_connected(server)):
            raise ApiError("The environment's server is not connected; nothing was destroyed. "
                           "Try again once its agent is back.", code="server_unreachable",
                           status=502)
        deployments.set_environment_status(env, "destroying", org_id)
        deployments.count_requested(berth, org_id)
        extra = {"delete_data": bool(delete_data)}
        if env.server_id is None:  # never placed on a server: nothing to remove there
            d = _record_without_server(env, user, extra)
            _settle(d, env, org_id, True, {}, None)
            return response(Deployment.get_by_id(d.id))
        d = deployments.start(env, env.project, berth.settings, trigger="destroy", kind="destroy",
                              triggered_by=user.id, delete_data=delete_data, extra_data=extra)
    deployments.wake(berth, env.server_id)
    return _await(d.id, berth.settings.get("DESTROY_WAIT_SECONDS", 60))


def _record_without_server(env, user, extra):
    version = (Deployment.select(fn.MAX(Deployment.version))
               .where(Deployment.environment == env.id).scalar() or 0) + 1
    return Deployment.create(environment=env, project=env.project_id, version=version,
                             kind="destroy", trigger="destroy",
                             status=states.check("deployment", None, "pending"),
                             git_branch=env.branch, triggered_by=user.id, extra_data=extra)


def _await(deployment_id, wait_seconds):
    deadline = time.monotonic() + wait_seconds
    while True:
        d = Deployment.get_by_id(deployment_id)
        if d.status == "destroyed":
            return response(d)
        if d.status in states.DEPLOYMENT_TERMINAL:  # failed (by the agent, or reaped)
            raise ApiError(f"The server could not destroy the environment: {d.error_message}",
                           code="destroy_failed", status=502, deployment_id=str(d.id))
        if time.monotonic() >= deadline:
            raise ApiError(f"The server did not finish destroying the environment within "
                           f"{wait_seconds} s. The destroy goes on: deployment {d.id} becomes "
                           "`destroyed` when the agent answers.", code="destroy_timeout",
                           status=504, deployment_id=str(d.id))
        time.sleep(POLL_SECONDS)


def response(d):
    extra = d.extra_data or {}
    return {"message": f"Environment {d.environment_id} destroyed"
                       + (" with its data." if extra.get("deleted_data") else
                          "; its directory (add-ons, filestore, logs) was kept."),
            "environment_id": d.environment_id, "deployment_id": d.id,
            "deleted_containers": int(extra.get("deleted_containers") or 0),
            "deleted_database": bool(extra.get("deleted_database")),
            "deleted_data": bool(extra.get("deleted_data"))}


def settle(d, ok, result, error):
    """The agent's result for a destroy (called by deployments.on_result, inside
    its transaction, for a destroy that is not terminal yet)."""
    env = Environment.get_by_id(d.environment_id)
    org_id = Project.get_by_id(d.project_id).organization_id
    _settle(d, env, org_id, ok, result, error)


def _settle(d, env, org_id, ok, result, error):
    now = clock.now()
    fields = {"status": states.check("deployment", d.status, "destroyed" if ok else "failed"),
              "completed_at": now, "updated_at": now, "started_at": d.started_at or now}
    if ok:
        fields["extra_data"] = {**(d.extra_data or {}),
                                "deleted_containers": int(result.get("deleted_containers") or 0),
                                "deleted_database": bool(result.get("deleted_database")),
                                "deleted_data": bool(result.get("deleted_data"))}
    else:
        fields["error_message"] = (error or "the destroy failed")[:2000]
    if not (Deployment.update(**fields)
            .where(Deployment.id == d.id, Deployment.status == d.status).execute()):
        return
    if ok:
        env.is_active = False
        Environment.update(is_active=False, erp_container=None, db_container=None,
                           updated_at=now).where(Environment.id == env.id).execute()
        events.record_deleted(env.id, env.project_id, org_id)
    deployments.set_environment_status(env, "pending" if ok else "failed", org_id)
    events.record_finished(d, org_id, ok, now)
