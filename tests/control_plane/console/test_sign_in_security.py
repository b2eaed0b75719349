"""The console's sign-in against an attacker, on both databases: where a sign-in
may send the browser, and e-mails read whatever their case."""

import re

import pytest

from control_plane.models import AuditEvent, User, WebSession
from tests.control_plane.console.test_console import HOST, PASSWORD, Browser, _text, _user


@pytest.mark.parametrize("target", ["/\t/evil.example/phish", "/\n/evil.example", "/\r\n/x",
                                    "\t//evil.example", "/\\/evil.example", "https:evil.example",
                                    "javascript:alert(1)", " //evil.example", "/\x0b/evil.example"])
def test_sign_in_never_sends_the_browser_to_another_site(app, world, target):
    """Browsers drop tabs and newlines from a URL and read `\\` as `/`: such a path
    names another host. The sign-in page's own form carries the target on."""
    user = _user(world, world.org())
    b = Browser(app)
    page = _text(b.get("/sign-in", query_string={"next": target}))
    carried = re.search(r'name="next" value="([^"]*)"', page).group(1)
    assert carried == "/projects"
    r = b.sign_in(user.email, next=target)
    assert r.status_code == 303 and r.headers["Location"] == "/projects", r.headers
    # A path of this site, query included, is followed.
    r = b.sign_in(user.email, next="/servers?page=2")
    assert r.headers["Location"] == "/servers?page=2"


def test_a_newline_in_next_still_signs_in_once(app, world):
    user = _user(world, world.org())
    r = Browser(app).sign_in(user.email, next="/projects\r\nSet-Cookie: x=y")
    assert r.status_code == 303 and r.headers["Location"] == "/projects"
    assert r.headers["Set-Cookie"].startswith("berth_session=ses_")
    assert WebSession.select().where(WebSession.user == user.id).count() == 1
    assert AuditEvent.select().where(AuditEvent.action == "user.sign_in",
                                     AuditEvent.actor_id == str(user.id)).count() == 1


def test_the_email_is_read_whatever_its_case(app, world):
    lower = _user(world, world.org())  # userN@example.com
    mixed = _user(world, world.org())
    User.update(email="Admin.Case@Example.com").where(User.id == mixed.id).execute()
    for typed in (lower.email.upper(), "admin.case@example.com", " ADMIN.CASE@example.COM "):
        r = Browser(app).client.post("/sign-in", headers={"Origin": HOST},
                                     data={"email": typed, "password": PASSWORD})
        assert r.status_code == 303, typed
