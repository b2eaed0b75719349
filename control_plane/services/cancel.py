"""Cancel (POST /api/v1/deployments/{id}/cancel): the deployment is `cancelled`
at once and the environment goes back to its last stable state.

Running steps are not killed and partial changes stay (the agent may finish
what it started); commands the agent has not finished are withdrawn, so they
are never sent again, and a result that still comes changes nothing. Who
cancelled is kept in `extra_data.cancelled_by` (user id and name) and in a
warning line of the task log (name only); a `deploy.cancelled` event goes to the
outbox. Never the e-mail address: read-only keys of the organization read both."""

from control_plane import clock, events, states
from control_plane.db import database
from control_plane.errors import BadRequest
from control_plane.models import Deployment, Environment, TaskLogLine
from control_plane.services import commands, deployments, operations

# Task-log lines the control plane writes are numbered from here, after any line
# of the agent's, so neither ever replaces the other.
CONTROL_PLANE_SEQ = 1_000_000_000


def cancel(user, deployment_id):
    """Returns `{message}`; 400 unless the deployment is pending or running (a
    deletion or destroy is never cancelled)."""
    with database.atomic():
        d, env = operations.deployment_for_change(user, deployment_id, operations.CANCEL)
        if d.status not in ("pending", "running"):
            raise BadRequest(f"Only a pending or running deployment can be cancelled; this one "
                             f"is {d.status}.", code="deployment_not_cancellable")
        if d.kind in ("delete", "destroy"):
            raise BadRequest("A deletion or destroy cannot be cancelled.",
                             code="deployment_not_cancellable")
        now = clock.now()
        who = {"id": str(user.id), "name": user.name}
        claimed = (Deployment.update(
            status=states.check("deployment", d.status, "cancelled"), completed_at=now,
            updated_at=now, extra_data={**d.extra_data, "cancelled_by": who,
                                        "cancelled_at": now.isoformat() + "Z"})
            .where(Deployment.id == d.id, Deployment.status == d.status).execute())
        if not claimed:  # the agent's result settled it between our read and this update
            raise BadRequest("The deployment finished meanwhile.", code="deployment_not_cancellable")
        commands.withdraw(d.id, f"cancelled by {user.name}")
        log_line(d.id, "warning", f"Cancelled by {user.name}: running steps were "
                                  "not stopped and partial changes were not undone.")
        org_id = env.project.organization_id
        restored = _restore(env, d, org_id)
        events.record_cancelled(d, org_id, user.id, restored)
    return {"message": f"Deployment {d.id} (version {d.version}) cancelled by {user.name}; "
                       f"the environment is {restored}."}


def log_line(deployment_id, level, message):
    seq = (TaskLogLine.select(TaskLogLine.seq).where(TaskLogLine.deployment == deployment_id,
                                                      TaskLogLine.seq >= CONTROL_PLANE_SEQ)
           .order_by(TaskLogLine.seq.desc()).scalar() or CONTROL_PLANE_SEQ - 1) + 1
    TaskLogLine.create(deployment=deployment_id, seq=seq, level=level, message=message)


def last_stable_status(env_id, excluding):
    """What the newest settled deployment (success, failed or destroyed) left the
    environment as; `pending` when there is none (never provisioned)."""
    last = (Deployment.select().where(Deployment.environment == env_id, Deployment.id != excluding,
                                      Deployment.status.in_(("success", "failed", "destroyed")))
            .order_by(Deployment.version.desc()).first())
    if last is None or last.status == "destroyed":
        return "pending", last is not None
    if last.status == "failed":
        return "failed", False
    return deployments.KINDS[last.kind][2], False


def _restore(env, cancelled, org_id):
    """Only a task that moved the environment (to `deploying`) moves it back."""
    if env.status != deployments.KINDS[cancelled.kind][1]:
        return env.status
    status, destroyed = last_stable_status(env.id, cancelled.id)
    deployments.set_environment_status(env, status, org_id)
    if destroyed:  # deployed again after a destroy, then cancelled: destroyed again
        Environment.update(is_active=False).where(Environment.id == env.id).execute()
        events.record_deleted(env.id, env.project_id, org_id)
    return status
