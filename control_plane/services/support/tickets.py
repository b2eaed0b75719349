"""Support tickets: read-only through the API, created by staff tooling."""

from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.infra.pagination import CursorList
from control_plane.models import Environment, Organization, Project, Server, Ticket, TicketComment
from control_plane.models.ticket import TICKET_STATUSES
from control_plane.services import audit
from control_plane.services.accounts.scope import require_org_scope
from control_plane.vocabulary.errors import BadRequest, NotFound, SupportTicketsNotEnabled
from control_plane.vocabulary.states import TicketStatus

PRIORITIES = ("low", "normal", "high", "urgent")


def require_ticket_access(actor):
    require_org_scope(actor, "Support tickets need an organization-scoped actor.")
    if not actor.support_tickets:
        raise SupportTicketsNotEnabled("Support tickets are not enabled for this actor.")


LISTED_FIELDS = (Ticket.id, Ticket.ticket_number, Ticket.subject, Ticket.status, Ticket.priority,
                 Ticket.category, Ticket.source, Ticket.project.alias("project_id"),
                 Ticket.environment.alias("environment_id"), Ticket.server.alias("server_id"),
                 Ticket.created_at, Ticket.updated_at, Ticket.resolved_at, Ticket.closed_at)


def _listed(org, *status, shape):
    # Only the fields a list entry shows: staff-only columns are never read.
    query = Ticket.select(*LISTED_FIELDS).where(Ticket.organization == org)
    return query.where(Ticket.status == status[0]) if shape == ("status",) else query


TICKETS = CursorList("tickets", Ticket, _listed, newest_first=True)


def list_tickets(actor, *, status=None, limit, cursor):
    """Newest first; a cursor is valid only with the status filter it was made with."""
    require_ticket_access(actor)
    org = actor.organization_id.hex
    if status:
        return TICKETS.page(org, status, shape=("status",), limit=limit, cursor=cursor)
    return TICKETS.page(org, limit=limit, cursor=cursor)


def get_ticket(actor, ticket_id):
    require_ticket_access(actor)
    ticket = Ticket.get_or_none(Ticket.id == ticket_id, Ticket.organization == actor.organization_id)
    if ticket is None:
        raise NotFound("Ticket not found.")
    ticket.public_comments = list(
        TicketComment.select().where(TicketComment.ticket == ticket, ~TicketComment.is_internal)
        .order_by(TicketComment.created_at, TicketComment.id))
    return ticket


def create_ticket(*, org_id, subject, description, status=TicketStatus.OPEN, priority="normal",
                  category="general", project_id=None, environment_id=None, server_id=None,
                  requester_email=None):
    if status not in TICKET_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(TICKET_STATUSES)}")
    if priority not in PRIORITIES:
        raise BadRequest(f"priority must be one of {', '.join(PRIORITIES)}")
    with database.atomic():
        org = for_update(Organization.select().where(Organization.id == org_id)).first()
        if org is None:
            raise NotFound("organization not found")
        _check_links(org, project_id, environment_id, server_id)
        org.ticket_seq += 1
        org.save(only=[Organization.ticket_seq])
        now = clock.now()
        audit.record(org.id, "ticket.create", "ticket", None, {"subject": subject,
                                                               "priority": priority})
        return Ticket.create(
            organization=org, ticket_number=f"TCK-{org.id.hex[:6].upper()}-{org.ticket_seq:05d}",
            subject=subject, description=description, status=status, priority=priority,
            category=category, source="staff", project=project_id, environment=environment_id,
            server=server_id, requester_email=requester_email, updated_at=now,
            resolved_at=now if status == TicketStatus.RESOLVED else None,
            closed_at=now if status == TicketStatus.CLOSED else None)


def _check_links(org, project_id, environment_id, server_id):
    """A ticket may only point at the organization's own resources (or a shared server)."""
    if project_id is not None and not Project.select().where(
            Project.id == project_id, Project.organization == org).exists():
        raise NotFound("project not found in that organization")
    if environment_id is not None and not Environment.select().join(Project).where(
            Environment.id == environment_id, Project.organization == org).exists():
        raise NotFound("environment not found in that organization")
    if server_id is not None and not Server.select().where(
            Server.id == server_id,
            (Server.organization == org) | Server.organization.is_null()).exists():
        raise NotFound("server not found in that organization")


def add_comment(ticket_id, *, author, content, from_support=False, internal=False):
    with database.atomic():
        ticket = Ticket.get_or_none(Ticket.id == ticket_id)
        if ticket is None:
            raise NotFound("ticket not found")
        comment = TicketComment.create(ticket=ticket, author_name=author, content=content,
                                       from_support=from_support, is_internal=internal)
        audit.record(ticket.organization_id, "ticket.comment", "ticket", ticket.id,
                     {"internal": internal})
        Ticket.update(updated_at=clock.now()).where(Ticket.id == ticket.id).execute()
        return comment
