"""The console's sign-in and second factor against an attacker, on both databases:
where a sign-in may send the browser, codes that work once, a second factor that
cannot be swapped or guessed at, and e-mails read whatever their case."""

import datetime as dt
import re

import pyotp
import pytest

from control_plane.models import AuditEvent, User, WebSession
from tests.control_plane.console.test_console import HOST, PASSWORD, Browser, _text, _user


@pytest.fixture
def member(app, world, fake_clock):
    """A signed-in user, the clock held still at the middle of a TOTP step."""
    fake_clock.now = fake_clock.now.replace(second=15, microsecond=0)
    user = _user(world, world.org())
    b = Browser(app)
    assert b.sign_in(user.email).status_code == 303
    return user, b


def _code(secret, clock, steps=0):
    """The code of `secret` at the (fake) clock's time, `steps` steps of 30 s away."""
    now = clock.now.replace(tzinfo=dt.UTC).timestamp()
    return pyotp.TOTP(secret).at(now + 30 * steps)


def _offer(b):
    page = _text(b.get("/account"))
    secret = re.search(r'<code class="secret">([A-Z2-7]+)</code>', page).group(1)
    sealed = re.search(r'name="sealed" value="([^"]+)"', page).group(1)
    return secret, sealed


def _turn_on(b, clock):
    secret, sealed = _offer(b)
    r = b.post("/account/totp", {"sealed": sealed, "code": _code(secret, clock)})
    assert r.status_code == 303, _text(r)
    clock.advance(seconds=30)  # the code that turned it on is spent
    return secret


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
    assert carried == "/"  # the overview
    r = b.sign_in(user.email, next=target)
    assert r.status_code == 303 and r.headers["Location"] == "/", r.headers
    # A path of this site, query included, is followed.
    r = b.sign_in(user.email, next="/servers?page=2")
    assert r.headers["Location"] == "/servers?page=2"


def test_a_newline_in_next_still_signs_in_once(app, world):
    user = _user(world, world.org())
    r = Browser(app).sign_in(user.email, next="/projects\r\nSet-Cookie: x=y")
    assert r.status_code == 303 and r.headers["Location"] == "/"
    assert r.headers["Set-Cookie"].startswith("berth_session=ses_")
    assert WebSession.select().where(WebSession.user == user.id).count() == 1
    assert AuditEvent.select().where(AuditEvent.action == "user.sign_in",
                                     AuditEvent.actor_id == str(user.id)).count() == 1


def test_a_code_signs_in_once(app, world, member, fake_clock):
    user, b = member
    secret = _turn_on(b, fake_clock)
    code = _code(secret, fake_clock)
    assert Browser(app).sign_in(user.email, code=code).status_code == 303
    again = Browser(app).sign_in(user.email, code=code)
    assert again.status_code == 401 and "Set-Cookie" not in again.headers
    # The step before is still within the drift allowed, but older than the one used.
    assert Browser(app).sign_in(user.email, code=_code(secret, fake_clock, -1)).status_code == 401
    # The next step's code works, once.
    app.extensions["berth"].limiter.reset()
    fake_clock.advance(seconds=30)
    assert Browser(app).sign_in(user.email, code=_code(secret, fake_clock)).status_code == 303
    assert Browser(app).sign_in(user.email, code=_code(secret, fake_clock)).status_code == 401
    assert WebSession.select().where(WebSession.user == user.id).count() == 3


def test_the_code_that_turns_it_on_does_not_sign_in(app, world, member, fake_clock):
    user, b = member
    secret, sealed = _offer(b)
    code = _code(secret, fake_clock)
    assert b.post("/account/totp", {"sealed": sealed, "code": code}).status_code == 303
    assert Browser(app).sign_in(user.email, code=code).status_code == 401


def test_an_offer_cannot_replace_a_second_factor_that_is_on(app, world, member, fake_clock):
    user, b = member
    old_secret, old_sealed = _offer(b)  # kept from before the factor was on
    secret = _turn_on(b, fake_clock)
    stored = User.get_by_id(user.id).totp_secret
    r = b.post("/account/totp", {"sealed": old_sealed, "code": _code(old_secret, fake_clock)})
    assert r.status_code == 409 and "turn it off" in _text(r)
    assert User.get_by_id(user.id).totp_secret == stored
    # Turned off with a code from it, a new one can be set up.
    assert b.post("/account/totp", {"action": "disable", "code": _code(secret, fake_clock)}
                  ).status_code == 303
    assert _turn_on(b, fake_clock)


def test_an_offer_expires(app, world, member, fake_clock):
    user, b = member
    secret, sealed = _offer(b)
    fake_clock.advance(minutes=16)
    r = b.post("/account/totp", {"sealed": sealed, "code": _code(secret, fake_clock)})
    assert r.status_code == 400 and "expired" in _text(r)
    assert User.get_by_id(user.id).totp_secret is None
    assert _turn_on(b, fake_clock)  # a fresh page's offer works


def test_wrong_codes_to_turn_it_off_are_limited(app, world, member, fake_clock):
    user, b = member
    secret = _turn_on(b, fake_clock)
    answers = [b.post("/account/totp", {"action": "disable", "code": f"{n:06d}"})
               for n in range(30)]
    statuses = [r.status_code for r in answers]
    assert 429 in statuses, statuses
    first = statuses.index(429)
    assert set(statuses[:first]) == {401} and set(statuses[first:]) == {429}
    assert int(answers[-1].headers["Retry-After"]) > 0
    # Even the right code waits for the window.
    r = b.post("/account/totp", {"action": "disable", "code": _code(secret, fake_clock)})
    assert r.status_code == 429
    assert User.get_by_id(user.id).totp_secret is not None


def test_turning_it_on_ends_the_users_other_sessions(app, world, member, fake_clock):
    user, b = member
    other = Browser(app)
    assert other.sign_in(user.email).status_code == 303
    _turn_on(b, fake_clock)
    assert b.get("/projects").status_code == 200  # this browser stays signed in
    r = other.get("/projects")
    assert r.status_code == 302 and r.headers["Location"].startswith("/sign-in")


def test_the_email_is_read_whatever_its_case(app, world):
    lower = _user(world, world.org())  # userN@example.com
    mixed = _user(world, world.org())
    User.update(email="Admin.Case@Example.com").where(User.id == mixed.id).execute()
    for typed in (lower.email.upper(), "admin.case@example.com", " ADMIN.CASE@example.COM "):
        r = Browser(app).client.post("/sign-in", headers={"Origin": HOST},
                                     data={"email": typed, "password": PASSWORD})
        assert r.status_code == 303, typed
