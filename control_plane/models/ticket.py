import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.environment import Environment
from control_plane.models.org import Organization
from control_plane.models.project import Project
from control_plane.models.server import Server
from control_plane.vocabulary.states import TicketStatus

TICKET_STATUSES = tuple(TicketStatus)


class Ticket(BaseModel):
    organization = peewee.ForeignKeyField(Organization, backref="tickets")
    ticket_number = peewee.CharField(max_length=32, unique=True)
    subject = peewee.CharField(max_length=255)
    description = peewee.TextField()
    status = peewee.CharField(max_length=32, default=TicketStatus.OPEN, index=True)
    priority = peewee.CharField(max_length=16, default="normal")
    category = peewee.CharField(max_length=32, default="general")
    source = peewee.CharField(max_length=16, default="api")
    project = peewee.ForeignKeyField(Project, null=True)
    environment = peewee.ForeignKeyField(Environment, null=True)
    server = peewee.ForeignKeyField(Server, null=True)
    # Staff-only fields: never returned by the API.
    requester_email = peewee.CharField(max_length=320, null=True)
    assignee = peewee.CharField(max_length=255, null=True)
    internal_tags = JSONField(default=list)
    sla_due_at = DateTimeField(null=True)
    satisfaction_rating = peewee.IntegerField(null=True)
    updated_at = DateTimeField(null=True)
    resolved_at = DateTimeField(null=True)
    closed_at = DateTimeField(null=True)


class TicketComment(BaseModel):
    ticket = peewee.ForeignKeyField(Ticket, backref="comments")
    author_name = peewee.CharField(max_length=255)
    from_support = peewee.BooleanField(default=False)
    is_internal = peewee.BooleanField(default=False)  # internal notes: never returned
    content = peewee.TextField()
