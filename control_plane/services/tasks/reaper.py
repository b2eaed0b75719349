"""The stuck-task reaper (a scheduler job): a task queued or running for longer
than its time limit is failed with a timeout message, and an environment it had
moved goes to `error`. No automatic retry.

A task's limit is fixed by its kind when it starts (`time_limit_minutes`): 30
minutes for most, 3 hours for those that move whole databases (backups, restores,
exports). A deploy that takes a pre-deploy backup first has the backup's 3 hours
until the agent reports the backup done (engine.record_phase); from then on it
has the spec's 30 minutes for the deploy itself. A limit counts from the last
sign of progress the control plane has: that report (`phase_started_at`), else
`started_at` (the agent acknowledged the command), else `created_at`; a
deployment that waited 20 minutes for its agent to come back still gets its full
30 minutes of work.

Several schedulers may run this at once: each row is claimed by a conditional
UPDATE (still in the status read, still past its limit) and only the caller whose
UPDATE changed it writes the rest, in the same transaction (engine.settle). So
each task is reaped once, with one failure event."""

import datetime as dt
import functools
import logging
import operator

from peewee import fn

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Deployment
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import states

log = logging.getLogger("berth.reaper")
D = states.DeploymentStatus

MESSAGE = "Deployment timed out after 30 minutes"  # the spec's words for a deployment's
BATCH = 200  # per run; the next run takes the rest


def _limits():
    """The distinct time limits of the tasks in progress (a handful)."""
    return [m for (m,) in Deployment.select(Deployment.time_limit_minutes).distinct()
            .where(Deployment.status.in_(engine.ACTIVE)).tuples()]


def _past_limit(now, limits):
    """Past its own limit: one condition per distinct limit, so that it is plain SQL
    on both databases."""
    last_progress = fn.COALESCE(Deployment.phase_started_at, Deployment.started_at,
                                Deployment.created_at)
    return functools.reduce(operator.or_, [
        (Deployment.time_limit_minutes == m) & (last_progress < now - dt.timedelta(minutes=m))
        for m in limits])


def stuck(now=None):
    """(id, status) of tasks past their limit, oldest first."""
    now, limits = now or clock.now(), _limits()
    if not limits:
        return []
    return list(Deployment.select(Deployment.id, Deployment.status)
                .where(Deployment.status.in_(engine.ACTIVE), _past_limit(now, limits))
                .order_by(Deployment.created_at, Deployment.id).limit(BATCH).tuples())


def reap():
    """Fail every stuck task; returns the ids this call reaped."""
    now = clock.now()
    reaped = [d for d, status in stuck(now) if reap_one(d, status, now)]
    if reaped:
        log.warning("reaped %d stuck deployment(s): %s", len(reaped),
                    ", ".join(str(d) for d in reaped))
    return reaped


def message(d):
    minutes = d.time_limit_minutes
    if minutes == 30:
        return MESSAGE
    hours = minutes // 60
    limit = f"{hours} hour{'s' * (hours > 1)}" if minutes % 60 == 0 else f"{minutes} minutes"
    if kinds.get(d.kind).deploys_code:  # still in its pre-deploy backup
        return f"Deployment timed out after {limit} in its pre-deploy backup"
    return f"{d.kind.capitalize()} timed out after {limit}"


def reap_one(deployment_id, status, now):
    """Claim and fail one task; False if someone else settled it first (another
    scheduler, the agent's result, a cancel). Its environment goes to `error`
    when the task had moved it (control_plane/vocabulary/lifecycle.py)."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status != status:
            return False
        why = message(d)
        outcome = engine.Outcome(D.FAILED, error=why, withdraw=why,
                                 log=("error", f"{why}: marked failed, not retried."))
        return engine.settle(d, outcome, only_if=_past_limit(now, [d.time_limit_minutes]),
                             now=now) is not None
