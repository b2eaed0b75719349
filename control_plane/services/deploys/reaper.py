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
each deployment is reaped once, with one `deploy.failed` event.

Backups and restores (lifecycle.NOT_DEPLOYMENTS) move whole databases and
filestores: they get LONG_CUTOFF instead, and fail (with their Backup rows,
`backup.failed` / `restore.failed`) the same way; so does a deploy that takes
a pre_deploy backup first."""

import datetime as dt
import logging

from peewee import fn

from control_plane import clock, states
from control_plane.db import database
from control_plane.models import Backup, Deployment
from control_plane.services.deploys import lifecycle

log = logging.getLogger("berth.reaper")
D = states.DeploymentStatus

CUTOFF = dt.timedelta(minutes=30)
MESSAGE = "Deployment timed out after 30 minutes"
LONG_CUTOFF = dt.timedelta(hours=3)
LONG_MESSAGE = "{kind} timed out after 3 hours"
BATCH = 200  # per run; the next run takes the rest


def _last_progress():
    return fn.COALESCE(Deployment.started_at, Deployment.created_at)


def _long():
    """The tasks that move whole databases: backups, restores, deploys with a
    pre_deploy backup."""
    return (Deployment.kind.in_(lifecycle.NOT_DEPLOYMENTS)
            | Deployment.id.in_(Backup.select(Backup.task)
                                .where(Backup.backup_type == "pre_deploy",
                                       Backup.task.is_null(False))))


def _past_cutoff(now):
    return ((~_long() & (_last_progress() < now - CUTOFF))
            | (_long() & (_last_progress() < now - LONG_CUTOFF)))


def stuck(now=None):
    """(id, status) of deployments past the cut-off, oldest first."""
    return list(Deployment.select(Deployment.id, Deployment.status)
                .where(Deployment.status.in_(lifecycle.ACTIVE), _past_cutoff(now or clock.now()))
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
    (another scheduler, the agent's result, a cancel). Its environment goes to
    `error` when the task had moved it (lifecycle.TRANSIENT)."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status != status:
            return False
        long = Deployment.select().where(Deployment.id == d.id, _long()).exists()
        message = LONG_MESSAGE.format(kind=d.kind.capitalize()) if long else MESSAGE
        outcome = lifecycle.Outcome(D.FAILED, error=message, withdraw=message,
                                    log=("error", f"{message}: marked failed, not retried."))
        settled = lifecycle.settle(d, outcome, only_if=_past_cutoff(now), now=now)
        return settled is not None
