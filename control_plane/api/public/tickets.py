"""Support tickets (read-only): /support/tickets."""

import marshmallow as ma
from flask import current_app
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint
from control_plane.models.ticket import TICKET_STATUSES
from control_plane.services.support import tickets as svc

blp = Blueprint("tickets", __name__, description="Support tickets (read-only)")


@blp.before_request
def require_access():
    # Before the query is validated: a key without ticket access learns nothing more.
    svc.require_ticket_access(current_actor())


class TicketListArgs(CursorArgs):
    status = ma.fields.String(validate=ma.validate.OneOf(TICKET_STATUSES), load_default=None)


class TicketSchema(Schema):
    # Only these fields: staff-only data (internal notes, assignee, tags,
    # response targets, ratings, e-mail addresses, attachments) never leaves.
    id = ma.fields.UUID(required=True)
    ticket_number = ma.fields.String(required=True)
    subject = ma.fields.String(required=True)
    status = ma.fields.String(required=True)
    priority = ma.fields.String(required=True)
    category = ma.fields.String(required=True)
    source = ma.fields.String(required=True)
    project_id = ma.fields.UUID(allow_none=True)
    environment_id = ma.fields.UUID(allow_none=True)
    server_id = ma.fields.UUID(allow_none=True)
    created_at = UTCDateTime(required=True)
    updated_at = UTCDateTime(allow_none=True)
    resolved_at = UTCDateTime(allow_none=True)
    closed_at = UTCDateTime(allow_none=True)


class CommentSchema(Schema):
    id = ma.fields.UUID(required=True)
    author_name = ma.fields.Method("author", required=True)
    from_support = ma.fields.Boolean(required=True)
    content = ma.fields.String(required=True)
    created_at = UTCDateTime(required=True)

    def author(self, comment):
        # Staff replies are signed with the team's name, not a person's.
        if comment.from_support:
            return current_app.config["SUPPORT_TEAM_NAME"]
        return comment.author_name


class TicketDetailSchema(TicketSchema):
    description = ma.fields.String(required=True)
    comments = ma.fields.List(ma.fields.Nested(CommentSchema), attribute="public_comments",
                              required=True)


TicketPage = cursor_page_schema(TicketSchema, "TicketPage")


@blp.route("/support/tickets")
class Tickets(MethodView):
    @blp.arguments(TicketListArgs, location="query")
    @blp.response(200, TicketPage)
    def get(self, args):
        """The organization's tickets, newest first (key needs the ticket capability)."""
        rows, meta = svc.list_tickets(current_actor(), **args)
        return {"data": rows, "pagination": meta}


@blp.route("/support/tickets/<uuid:ticket_id>")
class TicketById(MethodView):
    @blp.response(200, TicketDetailSchema)
    def get(self, ticket_id):
        """One ticket with its public replies, oldest first."""
        return svc.get_ticket(current_actor(), ticket_id)
