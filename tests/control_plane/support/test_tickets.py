"""Support tickets (read-only) through HTTP: capability, scope, filters, cursor
pages, public replies only, and nothing staff-only ever leaves."""

import uuid

import pytest
from itsdangerous import URLSafeSerializer

from control_plane.models.ticket import TICKET_STATUSES
from tests.conftest import auth

P = "/api/public/v1"
TICKETS = f"{P}/support/tickets"

LIST_KEYS = {"id", "ticket_number", "subject", "status", "priority", "category", "source",
             "project_id", "environment_id", "server_id", "created_at", "updated_at",
             "resolved_at", "closed_at"}
DETAIL_KEYS = LIST_KEYS | {"description", "comments"}
COMMENT_KEYS = {"id", "author_name", "from_support", "content", "created_at"}


def ticket(org, subject="Help", **kw):
    from control_plane.services.support import tickets
    kw.setdefault("description", f"About {subject}")
    return tickets.create_ticket(org_id=org.id, subject=subject, **kw)


def comment(t, author="Customer", content="hello", **kw):
    from control_plane.services.support import tickets
    return tickets.add_comment(t.id, author=author, content=content, **kw)


def ticket_key(world, org, key_type="read_only"):
    return world.key(org, key_type, support_tickets=True)[0]


def walk(client, raw, limit, **params):
    """All pages of the list; returns (ids in order, pages)."""
    ids, pages, cursor = [], [], None
    while True:
        query = {"limit": limit, **params}
        if cursor:
            query["cursor"] = cursor
        r = client.get(TICKETS, headers=auth(raw), query_string=query)
        assert r.status_code == 200, r.json
        pages.append(r.json)
        ids += [t["id"] for t in r.json["data"]]
        cursor = r.json["pagination"]["next_cursor"]
        if not r.json["pagination"]["has_more"]:
            assert cursor is None
            return ids, pages
        assert cursor
        assert len(pages) < 50, "pagination does not end"


# --- capability and scope ---------------------------------------------------

@pytest.mark.parametrize("key_type", ["read_only", "full_access"])
def test_key_without_capability_is_403_on_list_and_detail(client, world, key_type):
    org = world.org()
    t = ticket(org)
    raw, _ = world.key(org, key_type)
    # An invalid query too: the capability is checked before the query is read.
    for path in (TICKETS, f"{TICKETS}/{t.id}", f"{TICKETS}?status=bogus&limit=0"):
        r = client.get(path, headers=auth(raw))
        assert r.status_code == 403
        assert r.json == {"error": "support_tickets_not_enabled", "message": r.json["message"]}
        assert r.json["message"]


def test_project_scoped_key_is_403_org_scope_required(client, world):
    org = world.org()
    project = world.project(org)
    t = ticket(org, project_id=project.id)
    raw, _ = world.key(org, "read_only", scope="project", project=project)
    for path in (TICKETS, f"{TICKETS}/{t.id}"):
        r = client.get(path, headers=auth(raw))
        assert r.status_code == 403
        assert r.json["error"] == "org_scope_required"
        assert "subject" not in r.get_data(as_text=True)


@pytest.mark.parametrize("key_type", ["read_only", "full_access"])
def test_key_with_capability_lists_its_organization_tickets(client, world, key_type):
    org, other = world.org(), world.org()
    mine = ticket(org, "mine")
    ticket(other, "theirs")
    raw = ticket_key(world, org, key_type)
    r = client.get(TICKETS, headers=auth(raw))
    assert r.status_code == 200
    assert [t["id"] for t in r.json["data"]] == [str(mine.id)]
    assert r.json["pagination"] == {"has_more": False, "next_cursor": None, "total": 1}


def test_without_key_is_401(client, world):
    assert client.get(TICKETS).status_code == 401


# --- list shape, order, filters ---------------------------------------------

def test_list_entry_has_exactly_the_spec_fields(client, world):
    org = world.org()
    project = world.project(org)
    env = world.environment(project)
    t = ticket(org, "Broken", priority="high", category="billing", project_id=project.id,
               environment_id=env.id, server_id=project.server_id)
    raw = ticket_key(world, org)
    r = client.get(TICKETS, headers=auth(raw))
    assert set(r.json) == {"data", "pagination"}
    [entry] = r.json["data"]
    assert set(entry) == LIST_KEYS
    assert entry["id"] == str(t.id)
    assert entry["ticket_number"] == t.ticket_number and entry["ticket_number"]
    assert entry["subject"] == "Broken"
    assert (entry["status"], entry["priority"], entry["category"]) == ("open", "high", "billing")
    assert isinstance(entry["source"], str) and entry["source"]
    assert entry["project_id"] == str(project.id)
    assert entry["environment_id"] == str(env.id)
    assert entry["server_id"] == str(project.server_id)
    assert entry["created_at"].endswith("Z") and entry["updated_at"].endswith("Z")
    assert entry["resolved_at"] is None and entry["closed_at"] is None


def test_resolved_and_closed_tickets_carry_their_timestamps(client, world):
    org = world.org()
    resolved = ticket(org, "r", status="resolved")
    closed = ticket(org, "c", status="closed")
    raw = ticket_key(world, org)
    by_id = {t["id"]: t for t in client.get(TICKETS, headers=auth(raw)).json["data"]}
    assert by_id[str(resolved.id)]["resolved_at"].endswith("Z")
    assert by_id[str(resolved.id)]["closed_at"] is None
    assert by_id[str(closed.id)]["closed_at"].endswith("Z")


def test_newest_first(client, world, fake_clock):
    from control_plane.models import Ticket
    org = world.org()
    made = []
    for i in range(5):
        made.append(ticket(org, f"t{i}"))
        fake_clock.advance(minutes=1)
    # Creation time decides, not insertion order: make the first one the newest.
    Ticket.update(created_at=fake_clock.now).where(Ticket.id == made[0].id).execute()
    raw = ticket_key(world, org)
    data = client.get(TICKETS, headers=auth(raw)).json["data"]
    assert [t["subject"] for t in data] == ["t0", "t4", "t3", "t2", "t1"]


def test_status_filter_returns_only_that_status(client, world, fake_clock):
    org = world.org()
    made = {}
    for status in TICKET_STATUSES:
        made[status] = [ticket(org, f"{status}-{i}", status=status) for i in range(2)]
        fake_clock.advance(seconds=1)
    ticket(world.org(), "other org", status="open")
    raw = ticket_key(world, org)
    for status in TICKET_STATUSES:
        r = client.get(TICKETS, headers=auth(raw), query_string={"status": status})
        assert r.status_code == 200
        assert {t["status"] for t in r.json["data"]} == {status}
        assert {t["id"] for t in r.json["data"]} == {str(t.id) for t in made[status]}
        assert r.json["pagination"]["total"] == 2
    unfiltered = client.get(TICKETS, headers=auth(raw), query_string={"limit": 100}).json
    assert unfiltered["pagination"]["total"] == 2 * len(TICKET_STATUSES)


@pytest.mark.parametrize("status", ["OPEN", "pending", "done", "open,closed"])
def test_invalid_status_is_422(client, world, status):
    org = world.org()
    ticket(org)
    raw = ticket_key(world, org)
    r = client.get(TICKETS, headers=auth(raw), query_string={"status": status})
    assert r.status_code == 422
    assert set(r.json) == {"error", "message", "details"}
    assert r.json["error"] == "validation_error"
    assert "status" in r.json["message"]
    assert "status" in str(r.json["details"])


@pytest.mark.parametrize("limit", [0, 101, -1, "ten"])
def test_limit_out_of_bounds_is_422(client, world, limit):
    org = world.org()
    raw = ticket_key(world, org)
    r = client.get(TICKETS, headers=auth(raw), query_string={"limit": limit})
    assert r.status_code == 422 and r.json["error"] == "validation_error"


def test_default_page_size_is_20(client, world):
    org = world.org()
    for i in range(21):
        ticket(org, f"t{i}")
    raw = ticket_key(world, org)
    body = client.get(TICKETS, headers=auth(raw)).json
    assert len(body["data"]) == 20
    assert body["pagination"]["has_more"] is True and body["pagination"]["total"] == 21


# --- cursor pages ------------------------------------------------------------

@pytest.mark.parametrize("same_instant", [False, True], ids=["distinct-times", "same-time"])
def test_cursor_walk_returns_every_ticket_once_newest_first(client, world, fake_clock,
                                                            same_instant):
    org = world.org()
    made = []
    for i in range(23):
        made.append(ticket(org, f"t{i}"))
        if not same_instant:
            fake_clock.advance(seconds=1)
    raw = ticket_key(world, org)
    ids, pages = walk(client, raw, limit=5)
    assert [len(p["data"]) for p in pages] == [5, 5, 5, 5, 3]
    assert all(p["pagination"]["total"] == 23 for p in pages)
    assert [p["pagination"]["has_more"] for p in pages] == [True] * 4 + [False]
    assert len(ids) == len(set(ids)) == 23
    assert set(ids) == {str(t.id) for t in made}
    if not same_instant:
        assert ids == [str(t.id) for t in reversed(made)]
    # One big page gives the same order as the walk.
    full = client.get(TICKETS, headers=auth(raw), query_string={"limit": 100}).json
    assert [t["id"] for t in full["data"]] == ids
    assert full["pagination"] == {"has_more": False, "next_cursor": None, "total": 23}


def test_exact_multiple_of_limit_ends_without_cursor(client, world):
    org = world.org()
    for i in range(4):
        ticket(org, f"t{i}")
    raw = ticket_key(world, org)
    ids, pages = walk(client, raw, limit=2)
    assert len(pages) == 2 and len(set(ids)) == 4


def test_cursor_walk_with_status_filter(client, world, fake_clock):
    org = world.org()
    opened = []
    for i in range(7):
        opened.append(ticket(org, f"o{i}", status="open"))
        ticket(org, f"c{i}", status="closed")
        fake_clock.advance(seconds=1)
    raw = ticket_key(world, org)
    ids, pages = walk(client, raw, limit=3, status="open")
    assert ids == [str(t.id) for t in reversed(opened)]
    assert all(p["pagination"]["total"] == 7 for p in pages)


def test_cursor_does_not_skip_tickets_created_between_pages(client, world, fake_clock):
    org = world.org()
    first = []
    for i in range(4):
        fake_clock.advance(seconds=1)
        first.append(ticket(org, f"t{i}"))
    raw = ticket_key(world, org)
    page1 = client.get(TICKETS, headers=auth(raw), query_string={"limit": 2}).json
    fake_clock.advance(seconds=1)
    ticket(org, "newer")  # newer than the cursor position: belongs before page 1
    page2 = client.get(TICKETS, headers=auth(raw), query_string={
        "limit": 2, "cursor": page1["pagination"]["next_cursor"]}).json
    ids = [t["id"] for t in page1["data"] + page2["data"]]
    assert ids == [str(t.id) for t in reversed(first)]


def _first_cursor(client, raw, **params):
    body = client.get(TICKETS, headers=auth(raw), query_string={"limit": 1, **params}).json
    assert body["pagination"]["has_more"]
    return body["pagination"]["next_cursor"]


def test_cursor_from_another_status_filter_is_invalid(client, world):
    org = world.org()
    for status in ("open", "open", "closed", "closed"):
        ticket(org, status=status)
    raw = ticket_key(world, org)
    open_cursor = _first_cursor(client, raw, status="open")
    unfiltered_cursor = _first_cursor(client, raw)
    for params in ({"status": "closed", "cursor": open_cursor},
                   {"cursor": open_cursor},
                   {"status": "open", "cursor": unfiltered_cursor}):
        r = client.get(TICKETS, headers=auth(raw), query_string=params)
        assert r.status_code == 400, params
        assert r.json == {"error": "invalid_cursor", "message": r.json["message"]}
    # The same filter continues fine.
    r = client.get(TICKETS, headers=auth(raw), query_string={"status": "open",
                                                             "cursor": open_cursor})
    assert r.status_code == 200 and len(r.json["data"]) == 1


def test_cursor_from_projects_list_is_invalid(client, world):
    org = world.org()
    server = world.server(org)
    world.project(org, server=server)
    world.project(org, server=server)
    ticket(org)
    ticket(org)
    raw = ticket_key(world, org)
    projects = client.get(f"{P}/projects", headers=auth(raw), query_string={"limit": 1}).json
    cursor = projects["pagination"]["next_cursor"]
    assert cursor
    r = client.get(TICKETS, headers=auth(raw), query_string={"cursor": cursor})
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


def test_forged_or_garbage_cursor_is_invalid(client, world):
    org = world.org()
    made = [ticket(org, f"t{i}") for i in range(3)]
    raw = ticket_key(world, org)
    good = _first_cursor(client, raw)
    forged = URLSafeSerializer("guessed-secret", salt="berth-cursor:tickets").dumps(
        ["2000-01-01T00:00:00", made[0].id.hex, ""])
    tampered = good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB")
    for cursor in ("garbage", "e30", "W10.abc", forged, tampered, good + "x"):
        r = client.get(TICKETS, headers=auth(raw), query_string={"cursor": cursor})
        assert r.status_code == 400, cursor
        assert r.json["error"] == "invalid_cursor"


def test_cursor_of_another_organization_shows_only_own_tickets(client, world):
    org_a, org_b = world.org(), world.org()
    for i in range(3):
        ticket(org_a, f"a{i}")
        ticket(org_b, f"b{i}")
    raw_a, raw_b = ticket_key(world, org_a), ticket_key(world, org_b)
    cursor_a = _first_cursor(client, raw_a)
    r = client.get(TICKETS, headers=auth(raw_b), query_string={"cursor": cursor_a})
    # Whatever the answer, B never sees A's tickets.
    if r.status_code == 200:
        assert all(t["subject"].startswith("b") for t in r.json["data"])
    else:
        assert r.status_code == 400


# --- single ticket -----------------------------------------------------------

def test_single_ticket_with_public_comments_oldest_first(client, world, fake_clock):
    from control_plane.models import TicketComment
    org = world.org()
    t = ticket(org, "Slow site", description="The site takes 30 s to load.")
    fake_clock.advance(minutes=1)
    c1 = comment(t, "Dana Customer", "It is slow since Monday.")
    fake_clock.advance(minutes=1)
    comment(t, "Carol Staffer", "Customer is on the legacy plan.", from_support=True,
            internal=True)
    fake_clock.advance(minutes=1)
    c3 = comment(t, "Carol Staffer", "We are looking into it.", from_support=True)
    fake_clock.advance(minutes=1)
    c4 = comment(t, "Dana Customer", "Thanks!")
    # Ordering follows created_at, not insertion: move c1 after c4.
    fake_clock.advance(minutes=1)
    TicketComment.update(created_at=fake_clock.now).where(TicketComment.id == c1.id).execute()

    raw = ticket_key(world, org)
    r = client.get(f"{TICKETS}/{t.id}", headers=auth(raw))
    assert r.status_code == 200
    body = r.json
    assert set(body) == DETAIL_KEYS
    assert body["id"] == str(t.id) and body["subject"] == "Slow site"
    assert body["description"] == "The site takes 30 s to load."
    assert [c["id"] for c in body["comments"]] == [str(c3.id), str(c4.id), str(c1.id)]
    for c in body["comments"]:
        assert set(c) == COMMENT_KEYS
        assert c["created_at"].endswith("Z")
    staff, customer, _ = body["comments"]
    assert staff == {**staff, "from_support": True, "author_name": "Berth Support",
                     "content": "We are looking into it."}
    assert customer == {**customer, "from_support": False, "author_name": "Dana Customer",
                        "content": "Thanks!"}
    text = r.get_data(as_text=True)
    assert "legacy plan" not in text
    assert "Carol Staffer" not in text


def test_staff_replies_are_signed_with_configured_team_name(app, client, world):
    org = world.org()
    t = ticket(org)
    comment(t, "Erin Engineer", "Fixed.", from_support=True)
    raw = ticket_key(world, org)
    assert app.config["SUPPORT_TEAM_NAME"] == "Berth Support"
    first = client.get(f"{TICKETS}/{t.id}", headers=auth(raw)).json["comments"]
    assert [c["author_name"] for c in first] == ["Berth Support"]
    app.config["SUPPORT_TEAM_NAME"] = "Acme Helpdesk"
    again = client.get(f"{TICKETS}/{t.id}", headers=auth(raw)).json["comments"]
    assert [c["author_name"] for c in again] == ["Acme Helpdesk"]


def test_ticket_without_comments_has_empty_list(client, world):
    org = world.org()
    t = ticket(org)
    comment(t, "Staff", "note", from_support=True, internal=True)
    raw = ticket_key(world, org)
    body = client.get(f"{TICKETS}/{t.id}", headers=auth(raw)).json
    assert body["comments"] == []


def test_staff_only_fields_never_leave(client, world, fake_clock):
    from control_plane.models import Ticket
    org = world.org()
    t = ticket(org, "Leak check", requester_email="alice.secret@customer.example")
    Ticket.update(assignee="bob-the-agent", internal_tags=["vip-tag-xyzzy"],
                  sla_due_at=fake_clock.now, satisfaction_rating=2).where(
        Ticket.id == t.id).execute()
    comment(t, "Agent Orange", "INTERNAL-NOTE-plugh", internal=True)
    comment(t, "Agent Orange", "support reply", from_support=True)
    comment(t, "Alice", "customer reply")
    raw = ticket_key(world, org)

    responses = [client.get(TICKETS, headers=auth(raw)),
                 client.get(TICKETS, headers=auth(raw), query_string={"status": "open"}),
                 client.get(f"{TICKETS}/{t.id}", headers=auth(raw))]
    for r in responses:
        assert r.status_code == 200
        text = r.get_data(as_text=True)
        for secret in ("alice.secret@customer.example", "bob-the-agent", "vip-tag-xyzzy",
                       "INTERNAL-NOTE-plugh", "Agent Orange", "requester", "assignee",
                       "internal", "sla", "satisfaction", "rating", "email", "attachment"):
            assert secret not in text, secret
    assert set(responses[0].json["data"][0]) == LIST_KEYS
    detail = responses[2].json
    assert set(detail) == DETAIL_KEYS
    assert [set(c) for c in detail["comments"]] == [COMMENT_KEYS, COMMENT_KEYS]


def test_other_organization_ticket_is_404(client, world):
    org_a, org_b = world.org(), world.org()
    theirs = ticket(org_b, "secret subject")
    raw_a = ticket_key(world, org_a)
    r = client.get(f"{TICKETS}/{theirs.id}", headers=auth(raw_a))
    assert r.status_code == 404
    assert r.json == {"error": "not_found", "message": r.json["message"]}
    assert "secret subject" not in r.get_data(as_text=True)
    missing = client.get(f"{TICKETS}/{uuid.uuid4()}", headers=auth(raw_a))
    assert missing.status_code == 404 and missing.json == r.json
    assert client.get(f"{TICKETS}/not-a-uuid", headers=auth(raw_a)).status_code == 404
    # The owner sees it.
    raw_b = ticket_key(world, org_b)
    assert client.get(f"{TICKETS}/{theirs.id}", headers=auth(raw_b)).status_code == 200


def test_ticket_links_must_belong_to_the_organization(world):
    from control_plane.vocabulary.errors import NotFound
    org, other = world.org(), world.org()
    their_project = world.project(other)
    their_env = world.environment(their_project)
    for links in ({"project_id": their_project.id}, {"environment_id": their_env.id},
                  {"server_id": their_project.server_id}, {"project_id": uuid.uuid4()}):
        with pytest.raises(NotFound):
            ticket(org, **links)
    shared = world.server(None)
    assert ticket(org, server_id=shared.id).server_id == shared.id
