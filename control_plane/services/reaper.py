"""The stuck-deployment reaper (a scheduler job): a deployment (task) queued
or running for more than 30 minutes is failed with a timeout message, and its
environment goes to `error`. No automatic retry.

"For more than 30 minutes" counts from the last sign of progress the control
plane has: `started_at` (the agent acknowledged the command) once set, else
`created_at`. A deployment that waited 20 minutes for its agent to come back
still gets its full 30 minutes of work.

Several schedulers may run this at once: each row is claimed by a conditional
UPDATE (still in the status we read, still past the cut-off) and only the
caller whose UPDATE changed it writes the rest, in the same transaction. So
each deployment is reaped once, with one `deploy.failed` event."""

import datetime as dt
import logging

from peewee import fn

from control_plane import clock, events, states
from control_plane.db import database
from control_plane.models import Deployment, Environment, Project, TaskLogLine
from control_plane.services import commands, deployments

log = logging.getLogger("berth.reaper")

CUTOFF = dt.timedelta(minutes=30)
MESSAGE = "Deployment timed out after 30 minutes"
ACTIVE = ("pending", "running")
BATCH = 200  # per run; the next run takes the rest
# Task-log lines the control plane writes are numbered from here (as a cancel's
# are), after any of the agent's, so a late agent line never replaces ours.
CONTROL_PLANE_SEQ = 1_000_000_000
# The environment statuses a running task puts (or leaves) it in; a stuck task
# moves them to `error`. Tasks that do not move the environment (restart,
# start, stop) leave its status alone: nothing says what it is now.
TRANSIENT = ("deploying", "pending", "destroying")


def _last_progress():
    return fn.COALESCE(Deployment.started_at, Deployment.created_at)


def stuck(now=None):
    """(id, status) of deployments past the cut-off, oldest first."""
    cutoff = (now or clock.now()) - CUTOFF
    return list(Deployment.select(Deployment.id, Deployment.status)
                .where(Deployment.status.in_(ACTIVE), _last_progress() < cutoff)
                .order_by(Deployment.created_at, Deployment.id).limit(BATCH).tuples())


def reap():
    """Fail every stuck deployment; returns the ids this call reaped."""
    now = clock.now()
    reaped = [d for d, status in stuck(now) if reap_one(d, status, now)]
    if reaped:
        log.warning("reaped %d stuck deployment(s): %s", len(reaped),
                    ", ".join(str(d) for d in reaped))
    return reaped


def reap_one(deployment_id, status, now):
    """Claim and fail one deployment; False if someone else settled it first
    (another scheduler, the agent's result, a cancel)."""
    target = states.check("deployment", status, "failed")
    with database.atomic():
        claimed = (Deployment.update(status=target, error_message=MESSAGE, completed_at=now,
                                     updated_at=now)
                   .where(Deployment.id == deployment_id, Deployment.status == status,
                          _last_progress() < now - CUTOFF)
                   .execute())
        if claimed != 1:
            return False
        d = Deployment.get_by_id(deployment_id)
        commands.withdraw(d.id, MESSAGE)
        seq = max(CONTROL_PLANE_SEQ - 1, TaskLogLine.select(fn.MAX(TaskLogLine.seq))
                  .where(TaskLogLine.deployment == d.id).scalar() or 0) + 1
        TaskLogLine.create(deployment=d.id, seq=seq, level="error",
                           message=f"{MESSAGE}: marked failed, not retried.")
        project = Project.get_by_id(d.project_id)
        env = Environment.get_by_id(d.environment_id)
        if env.status in TRANSIENT:
            deployments.set_environment_status(env, "error", project.organization_id)
        events.record_finished(d, project.organization_id, False, now)
    return True
