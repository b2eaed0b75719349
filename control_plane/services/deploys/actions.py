"""What a person asks of an environment, on either API surface: act (deploy,
redeploy, restart, start, stop, delete), retry, rollback, cancel and destroy.

Each takes an environment its caller already resolved and locked (see `access`),
inside the caller's transaction, the actor, and the conflict code of the caller's
surface (`errors.TaskInProgress` for the public API, `errors.DeploymentInProgress`
for /api/v1). Order of the checks: the task's status (400), one task at a time (409),
the environment's table (409), the per-organization limits (429). A refused
request changes nothing and uses no rate-limit slot. Each task starts through
the task engine (services/tasks/engine.py `start`); the gateway is woken when the
transaction commits."""

from limits import RateLimitItemPerMinute

from control_plane.infra import clock
from control_plane.models import Server
from control_plane.services import agents
from control_plane.services.environment_settings import configuration
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import errors, lifecycle, states
from protocol.kinds import TaskKind

D, Trigger = states.DeploymentStatus, states.Trigger
TASK_IN_PROGRESS = errors.TaskInProgress  # the public API
DEPLOYMENT_IN_PROGRESS = errors.DeploymentInProgress  # /api/v1

# Per organization (spec Limits), on every deployment a person asks for, on either
# surface; automatic ones (git push, a registration's auto_deploy) do not count.
DEPLOYMENTS_PER_MINUTE = RateLimitItemPerMinute(10)
RETRIES_PER_MINUTE = RateLimitItemPerMinute(10)


def count_requested(berth, org_id, *, retry=False):
    """A slot of each limit that applies, or of none (429 target_rate_limit)."""
    limits = [(RETRIES_PER_MINUTE, "retries", "manual retries")] if retry else []
    limits.append((DEPLOYMENTS_PER_MINUTE, "deployments", "deployments"))  # narrower first
    berth.limiter.hit_all(
        [(item, f"ops-{name}", (org_id.hex,),
          f"Too many {what} for this organization (at most {item.amount} a minute).")
         for item, name, what in limits], error=errors.TargetRateLimited)


def refuse_if_busy(env, conflict):
    """`conflict`: the surface's error class (TASK_IN_PROGRESS or DEPLOYMENT_IN_PROGRESS)."""
    if engine.in_progress(env.id):
        raise conflict()


def act(env, kind, actor, *, berth, conflict, trigger=Trigger.MANUAL, retry=False, **start):
    """A new task of `kind`: the busy check, the environment's table, the rate-limit
    slot, then the task (engine.start: the environment's move, the record and its
    command)."""
    refuse_if_busy(env, conflict)
    engine.check_allowed(env, kind)
    count_requested(berth, env.project.organization_id, retry=retry)
    return engine.start(env, kind, berth=berth,
                        trigger=trigger, actor=actor, **start)


def retry(d, env, actor, *, berth, conflict):
    """A failed deployment again: same kind, branch, commit, image and configuration,
    next version, `extra_data.retry_of`. A retried rollback stays a rollback."""
    if d.status != D.FAILED:
        raise errors.DeploymentNotFailed(
            f"Only a failed deployment can be retried; this one is {d.status}.")
    if d.kind == TaskKind.DESTROY:
        raise errors.DeploymentNotFailed("A destroy is not retried; call destroy again.")
    if not kinds.get(d.kind).is_deployment:
        raise errors.TaskNotRetryable(f"A {d.kind} task is not retried; start a new {d.kind}.")
    extra = {k: v for k, v in d.extra_data.items() if k in ("rollback_to", "rollback_to_version")}
    return act(env, d.kind, actor, berth=berth, conflict=conflict, retry=True,
               trigger=Trigger.ROLLBACK if d.trigger == Trigger.ROLLBACK else Trigger.MANUAL,
               record=_repeating(d, rollback_from=d.rollback_from_id,
                                 extra_data={**extra, "retry_of": str(d.id)}))


def _repeating(d, **fields):
    """The task row's fields of a deployment done again: its code, image and
    configuration."""
    return {"git_branch": d.git_branch, "git_commit": d.git_commit, "image_tag": d.image_tag,
            "config": d.config, **fields}


def rollbackable(d):
    """A rollback target: a successful deployment of code whose flag allows it.
    Reads model objects and list rows (dicts) alike."""
    get = d.get if isinstance(d, dict) else (lambda name: getattr(d, name))
    return (get("status") == D.SUCCESS and get("kind") in kinds.names(deploys_code=True)
            and bool(get("can_rollback")))


def rollback(target, env, actor, *, berth, conflict):
    """Back TO a successful deployment: its commit, branch, image and configuration
    (data and schema stay as they are). The environment's configuration becomes
    the target's, so that later deployments keep what the rollback restored."""
    if not rollbackable(target):
        why = (f"it is {target.status}" if target.status != D.SUCCESS else
               "it deployed no code" if not kinds.get(target.kind).deploys_code else
               "it is marked as not available for rollback")
        raise errors.RollbackNotAllowed(f"Cannot roll back to this deployment: {why}.")
    configuration.adopt(env, target.config)  # undone with the transaction if refused below
    return act(env, TaskKind.DEPLOY, actor, berth=berth, conflict=conflict,
               trigger=Trigger.ROLLBACK, record=_repeating(
                   target, rollback_from=target.id, extra_data={
                       "rollback_to": str(target.id), "rollback_to_version": target.version}))


def cancel(d, actor):
    """(The caller holds the task's environment locked.) The task is `cancelled`
    at once and the environment goes back to its last stable state (`destroyed`
    after a destroy); returns that state. 400 unless the task is pending or
    running (a deletion or destroy is never cancelled).

    Running steps are not killed and partial changes stay (the agent may finish
    what it started); commands the agent has not finished are withdrawn, so they
    are never sent again, and a result that still comes changes nothing. Who
    cancelled is kept in `extra_data.cancelled_by` (user id and name) and in a
    warning line of the task log (name only); a `deploy.cancelled` event goes to
    the outbox. Never the e-mail address: read-only keys of the organization read
    both."""
    if d.status not in engine.ACTIVE:
        raise errors.DeploymentNotCancellable(
            f"Only a pending or running deployment can be cancelled; this one is {d.status}.")
    if lifecycle.rule(d.kind).removes:
        raise errors.DeploymentNotCancellable("A deletion or destroy cannot be cancelled.")
    now = clock.now()
    who = {"id": str(actor.user_id), "name": actor.name}
    restored = engine.settle(d, engine.Outcome(
        D.CANCELLED, fields={"extra_data": {**d.extra_data, "cancelled_by": who,
                                            "cancelled_at": now.isoformat() + "Z"}},
        withdraw=f"cancelled by {actor.name}", cancelled_by=actor.user_id,
        log=("warning", f"Cancelled by {actor.name}: running steps were "
                        "not stopped and partial changes were not undone.")), now=now)
    if restored is None:  # the agent's result settled it between our read and this update
        raise errors.DeploymentNotCancellable("The deployment finished meanwhile.")
    return restored


def destroy(env, actor, *, berth, conflict, delete_data=False):
    """A `destroy` task (trigger `destroy`) with the environment `destroying`; the
    agent removes the ERP and database containers, the database volume, the
    network and the configuration file, and the environment directory too with
    `delete_data`. On success the task and the environment are `destroyed` (the
    environment inactive, shown as `pending` where the spec fixes the status),
    without container references. An environment never placed on a server is
    destroyed at once; one whose server is not connected is refused (502
    `server_unreachable`) and nothing changes."""
    refuse_if_busy(env, conflict)
    server = env.server_id and Server.get_or_none(Server.id == env.server_id,
                                                  Server.deleted_at.is_null())
    if env.server_id is not None and (server is None or not agents.is_connected(server)):
        raise errors.ServerUnreachable("The environment's server is not connected; nothing "
                                       "was destroyed. Try again once its agent is back.")
    engine.check_allowed(env, TaskKind.DESTROY)
    count_requested(berth, env.project.organization_id)
    return engine.start(env, TaskKind.DESTROY, berth=berth,
                        trigger=Trigger.DESTROY, actor=actor, delete_data=delete_data,
                        record={"extra_data": {"delete_data": bool(delete_data)}})
