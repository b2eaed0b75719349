"""Retention (a scheduler job): what the spec or our own rules say is kept for
a while is deleted after it. Plain deletes by age: safe when several
schedulers run them at once, and each call removes at most BATCH rows per kind
so one turn never holds a long transaction.

- Task-log lines of deployments finished more than 90 days ago (spec: deployment
  log retention). The deployment records stay; their logs read as empty.
- Idempotency records past their 24 hours.
- Outbox events older than 30 days that every webhook is done with (fanned out,
  and no delivery row of theirs left).
- Custom-domain claims still pending 7 days after they were added.
- Automation rules deleted more than 90 days ago, with their runs.
- Audit events older than CP_AUDIT_RETENTION_DAYS (90), and shell sessions' records
  (with their transcripts) as old."""

import datetime as dt

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Deployment, Event, IdempotencyRecord, TaskLogLine, WebhookDelivery
from control_plane.services import audit
from control_plane.services.automation import rules
from control_plane.services.environment_settings import domains
from control_plane.services.servers import shells

LOG_RETENTION = dt.timedelta(days=90)
EVENT_RETENTION = dt.timedelta(days=30)
BATCH = 5000


def _delete_ids(model, ids):
    if not ids:
        return 0
    with database.atomic():
        return model.delete().where(model.id.in_(ids)).execute()


def prune_task_logs(now):
    old = Deployment.select(Deployment.id).where(Deployment.completed_at < now - LOG_RETENTION)
    ids = [i for (i,) in TaskLogLine.select(TaskLogLine.id)
           .where(TaskLogLine.deployment.in_(old)).limit(BATCH).tuples()]
    return _delete_ids(TaskLogLine, ids)


def prune_idempotency(now):
    ids = [i for (i,) in IdempotencyRecord.select(IdempotencyRecord.id)
           .where(IdempotencyRecord.expires_at < now).limit(BATCH).tuples()]
    return _delete_ids(IdempotencyRecord, ids)


def prune_events(now):
    owed = WebhookDelivery.select(WebhookDelivery.event)
    ids = [i for (i,) in Event.select(Event.id)
           .where(Event.fanned_out, Event.created_at < now - EVENT_RETENTION,
                  Event.id.not_in(owed)).limit(BATCH).tuples()]
    return _delete_ids(Event, ids)


def run(retention_days=90):
    """One turn; returns how many rows of each kind went. `retention_days`: the audit
    log's (CP_AUDIT_RETENTION_DAYS)."""
    now = clock.now()
    return {"task_log_lines": prune_task_logs(now), "idempotency_records": prune_idempotency(now),
            "events": prune_events(now), "domain_claims": domains.prune_pending(now, BATCH),
            "automation_rules": rules.sweep(now),
            "audit_events": audit.prune(now, retention_days),
            "shell_sessions": shells.prune(now, retention_days)}
