"""The shared queues' depth, for /metrics (observability.BacklogCollector)."""

import peewee

from control_plane.infra import clock
from control_plane.models import AgentCommand, WebhookDelivery
from control_plane.vocabulary import states


def snapshot():
    pending, oldest = (AgentCommand
                       .select(peewee.fn.COUNT(AgentCommand.id),
                               peewee.fn.MIN(AgentCommand.created_at))
                       .where(AgentCommand.status.in_(states.COMMAND_UNDELIVERED))
                       .tuples().get())
    if isinstance(oldest, str):  # SQLite returns MIN() of a datetime column as text
        oldest = AgentCommand.created_at.python_value(oldest)
    counts = dict(WebhookDelivery
                  .select(WebhookDelivery.status, peewee.fn.COUNT(WebhookDelivery.id))
                  .where(WebhookDelivery.status.in_([states.DeliveryStatus.RETRYING,
                                                     states.DeliveryStatus.FAILED]))
                  .group_by(WebhookDelivery.status).tuples())
    return {"commands_pending": pending,
            "commands_oldest_age_seconds":
                max(0.0, (clock.now() - oldest).total_seconds()) if oldest else 0.0,
            "webhooks_pending": counts.get(states.DeliveryStatus.RETRYING, 0),
            "webhooks_failed": counts.get(states.DeliveryStatus.FAILED, 0)}
