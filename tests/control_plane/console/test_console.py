"""The web console through HTTP, on both databases: signing in (password, second
factor, rate limit), sessions that end, the CSRF and origin guards on every write,
read-only users, escaping, the security headers, and the audit trail of its writes.
(The same pages in a real browser: test_console_browser.py.)"""

import datetime as dt
import gzip
import hashlib
import html
import json
import re
import urllib.parse

import pyotp
import pytest
import segno

from control_plane.models import AuditEvent, Environment, Project
from control_plane.services.accounts import sessions
from tests.conftest import auth

PASSWORD = "correct horse battery staple"
HOST = "http://localhost"


class Browser:
    """A Flask test client that signs in and sends writes as the console's forms do:
    from this origin, with the page's CSRF token."""

    def __init__(self, app):
        self.client = app.test_client()

    def sign_in(self, email, password=PASSWORD, code=None, next=None):
        data = {"email": email, "password": password, **({"code": code} if code else {}),
                **({"next": next} if next else {})}
        return self.client.post("/sign-in", data=data, headers={"Origin": HOST})

    def get(self, path, **kw):
        return self.client.get(path, **kw)

    def token(self):
        page = self.client.get("/account").get_data(as_text=True)
        return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)

    def post(self, path, data=None, token=True, origin=HOST, referer=None):
        """`referer`: the page the form is on (a path of this site, or an address)."""
        data = dict(data or {})
        if token is True:
            data["csrf_token"] = self.token()
        elif token:
            data["csrf_token"] = token
        headers = {"Origin": origin} if origin else {}
        if referer:
            headers["Referer"] = referer if "://" in referer else HOST + referer
        return self.client.post(path, data=data, headers=headers)


def _user(world, org, access="full_access", permissions=("project.environments.deploy",)):
    user = world.user(org, permissions)
    sessions.set_password(user.id, PASSWORD)
    if access != "full_access":
        sessions.set_access(user.id, access)
    return user


@pytest.fixture
def member(app, world):
    org = world.org()
    user = _user(world, org)
    b = Browser(app)
    assert b.sign_in(user.email).status_code == 303
    return org, user, b


def _text(r):
    return r.get_data(as_text=True)


def test_signing_in_gives_a_strict_cookie_and_every_page_its_headers(app, world):
    org = world.org()
    user = _user(world, org)
    b = Browser(app)
    r = b.get("/projects")
    assert r.status_code == 302 and r.headers["Location"].startswith("/sign-in?next=/projects")
    r = b.sign_in(user.email, next="/servers")
    assert r.status_code == 303 and r.headers["Location"] == "/servers"
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("berth_session=ses_")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert "Path=/" in cookie
    for path in ("/projects", "/servers", "/webhooks", "/channels", "/keys", "/audit",
                 "/account"):
        r = b.get(path)
        assert r.status_code == 200, path
        assert '<meta charset="utf-8">' in _text(r)
        assert re.search(r"<title>[^<>]+ · Berth</title>", _text(r)), path  # words only
        assert "<script>" not in _text(r)  # no inline code: the policy below forbids it
        csp = dict(p.strip().split(" ", 1) for p in r.headers["Content-Security-Policy"].split(";"))
        assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'"
        assert csp["style-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["Cache-Control"] == "no-store"
    # Behind HTTPS the cookie is Secure.
    app.config["PUBLIC_URL"] = "https://berth.example.com"
    r = b.sign_in(user.email)
    assert r.status_code == 303, _text(r)
    assert "Secure" in r.headers["Set-Cookie"]


def test_sign_in_goes_on_only_to_a_page_of_this_site(app, world):
    user = _user(world, world.org())
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        r = Browser(app).client.post("/sign-in", headers={"Origin": HOST}, data={
            "email": user.email, "password": PASSWORD, "next": target})
        assert r.status_code == 303 and r.headers["Location"] == "/", target


def test_a_wrong_password_and_an_unknown_email_read_the_same(app, world):
    user = _user(world, world.org())
    wrong = Browser(app).sign_in(user.email, password="not the password at all")
    unknown = Browser(app).sign_in("nobody@example.com")
    assert wrong.status_code == unknown.status_code == 401
    assert "Set-Cookie" not in wrong.headers and "Set-Cookie" not in unknown.headers
    message = "The e-mail or the password is not right."
    assert message in _text(wrong) and message in _text(unknown)
    # A user without a password (an operations-API user) cannot sign in at all.
    other = world.user(world.org())
    assert Browser(app).sign_in(other.email).status_code == 401


def test_sign_in_is_rate_limited_per_email(app, world):
    user = _user(world, world.org())
    b = Browser(app)
    for _ in range(5):
        assert b.sign_in(user.email, password="wrong password!!").status_code == 401
    r = b.sign_in(user.email)  # the right password, but the window is full
    assert r.status_code == 429 and "Too many attempts" in _text(r)
    assert "Set-Cookie" not in r.headers


def test_second_factor(app, world, member, fake_clock):
    _, user, b = member
    page = _text(b.get("/account"))
    secret = re.search(r'<code class="secret">([A-Z2-7]+)</code>', page).group(1)
    sealed = re.search(r'name="sealed" value="([^"]+)"', page).group(1)
    # The set-up link as a QR code (an SVG in a data: URI, which the page's policy
    # allows): the code of exactly the link shown beside it, which holds the secret.
    link = html.unescape(re.search(r'<a href="(otpauth://[^"]+)">otpauth link</a>', page)[1])
    assert f"secret={secret}" in link
    image = html.unescape(re.search(r'<img class="qr" src="([^"]+)"', page)[1])
    assert image.startswith("data:image/svg+xml") and "<svg" in urllib.parse.unquote(image)
    assert image == segno.make(link, error="m").svg_data_uri(
        scale=4, border=2, dark="#111827", light="#ffffff")

    def code():
        return pyotp.TOTP(secret).at(fake_clock.now.replace(tzinfo=dt.UTC).timestamp())

    # A wrong code turns nothing on.
    assert b.post("/account/totp", {"sealed": sealed, "code": "000000"}).status_code == 401
    assert b.post("/account/totp", {"sealed": sealed, "code": code()}).status_code == 303
    # The secret is stored sealed, not in clear.
    stored = type(user).get_by_id(user.id).totp_secret
    assert stored and secret not in stored
    assert Browser(b.client.application).sign_in(user.email).status_code == 401
    fake_clock.advance(seconds=30)  # the code that turned it on is spent
    fresh = Browser(b.client.application)
    assert fresh.sign_in(user.email, code=code()).status_code == 303
    assert fresh.get("/projects").status_code == 200
    # A lost device: the operator turns the factor off; the password alone signs in.
    sessions.totp_reset(user.id)
    assert Browser(b.client.application).sign_in(user.email).status_code == 303


def test_writes_need_the_sessions_token_and_this_origin(app, world, member):
    org, user, b = member
    server = world.server(org)
    form = {"name": "Shop", "server_id": str(server.id)}
    assert b.post("/projects", form, token=None).status_code == 403
    assert b.post("/projects", form, token="0" * 64).status_code == 403
    # Another session's token is not this one's.
    other = Browser(app)
    other.sign_in(user.email)
    assert b.post("/projects", form, token=other.token()).status_code == 403
    r = b.post("/projects", form, origin="https://evil.example")
    assert r.status_code == 403 and "own pages" in _text(r)
    assert b.post("/projects", form, origin=None).status_code == 403
    assert not Project.select().where(Project.organization == org.id).exists()
    r = b.post("/projects", form)
    assert r.status_code == 303
    assert Project.get(Project.organization == org.id).name == "Shop"


def test_a_read_only_user_sees_no_write_controls_and_is_refused(app, world):
    org = world.org()
    server = world.server(org)
    project = world.project(org, server)
    env = world.environment(project)
    user = _user(world, org, access="read_only")
    b = Browser(app)
    b.sign_in(user.email)
    for path in ("/projects", f"/projects/{project.id}", f"/environments/{env.id}", "/keys",
                 "/webhooks"):
        r = b.get(path)
        assert r.status_code == 200, path
        page = _text(r)
        assert 'method="post"' not in page.replace(
            'method="post" action="/sign-out"', ""), path
    refused = [("/projects", {"name": "x", "server_id": str(server.id)}),
               (f"/environments/{env.id}/actions/restart", {}),
               (f"/environments/{env.id}/destroy", {"confirm_name": env.name}),
               ("/keys", {"name": "k", "key_type": "full_access"})]
    for path, form in refused:
        r = b.post(path, form)
        assert r.status_code == 403 and "read-only" in _text(r), path
    assert Project.select().where(Project.organization == org.id).count() == 1
    assert not AuditEvent.select().where(AuditEvent.action != "user.sign_in").where(
        AuditEvent.actor_id == str(user.id)).exists()
    # Their own sessions are theirs to end.
    assert b.post("/sign-out").status_code == 303
    assert b.get("/projects").status_code == 302


def test_ended_sessions_are_signed_out_on_their_next_request(app, world, member, fake_clock):
    org, user, b = member
    other = Browser(app)
    other.sign_in(user.email)
    assert other.get("/projects").status_code == 200
    # The user ends the other browser's session from their account page.
    page = _text(b.get("/account"))
    ids = re.findall(r'action="/account/sessions/([0-9a-f-]+)/end"', page)
    assert len(ids) == 2
    mine = b.client.get_cookie("berth_session").value
    own = sessions.authenticate(mine)[0].id
    (theirs,) = [i for i in ids if i != str(own)]
    assert b.post(f"/account/sessions/{theirs}/end").status_code == 200  # asked first
    assert other.get("/projects").status_code == 200
    assert b.post(f"/account/sessions/{theirs}/end", {"confirmed": "1"}).status_code == 303
    r = other.get("/projects")
    assert r.status_code == 302 and r.headers["Location"].startswith("/sign-in")
    # A live part asks the page to go to the sign-in page (htmx's header).
    r = other.get(f"/projects/{world.project(org).id}/environment-rows",
                  headers={"HX-Request": "true"})
    assert r.status_code == 401 and r.headers["HX-Redirect"] == "/sign-in"
    # The operator signs the user out everywhere.
    assert sessions.end_all_sessions(user.id) == 1
    assert b.get("/projects").status_code == 302
    # A session unused for longer than its idle time ends.
    b.sign_in(user.email)
    fake_clock.advance(hours=11)
    assert b.get("/projects").status_code == 200  # used: its idle time starts again
    fake_clock.advance(hours=11)
    assert b.get("/projects").status_code == 200
    fake_clock.advance(hours=13)
    assert b.get("/projects").status_code == 302


def test_a_new_password_ends_every_session(app, world, member):
    _, user, b = member
    sessions.set_password(user.id, "another long password")
    assert b.get("/projects").status_code == 302
    assert b.sign_in(user.email).status_code == 401
    assert b.sign_in(user.email, password="another long password").status_code == 303


def test_names_users_typed_are_shown_as_text(app, world, member):
    org, user, b = member
    server = world.server(org, name="<img src=x onerror=alert(2)>")
    name = "<script>alert(1)</script>"
    assert b.post("/projects", {"name": name, "server_id": str(server.id)}).status_code == 303
    project = Project.get(Project.organization == org.id)
    env = world.environment(project)
    env.name = "</td><b>bold</b>"
    env.save()
    for path in ("/projects", f"/projects/{project.id}", f"/environments/{env.id}", "/servers",
                 "/audit"):
        r = b.get(path)
        assert r.status_code == 200, path
        page = _text(r)
        assert "<script>alert(1)" not in page and "<img src=x" not in page, path
        assert "<b>bold</b>" not in page, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _text(b.get("/projects"))


def test_console_writes_are_audited_as_the_user(app, world, member):
    org, user, b = member
    server = world.server(org)
    b.post("/projects", {"name": "Audited", "server_id": str(server.id)})
    r = b.post("/keys", {"name": "ci", "key_type": "read_only"})
    assert r.status_code == 201
    raw = re.search(r'id="secret">(svc_live_ro_[A-Za-z0-9_-]+)<', _text(r)).group(1)
    # An AI client's configuration for it, to copy: berthctl mcp with this key.
    config = json.loads(html.unescape(re.search(r'<pre id="mcp-config" class="copyable">(.*?)</pre>',
                                                _text(r), re.S).group(1)))
    assert config["mcpServers"]["berth"] == {"command": "berthctl", "args": ["mcp"], "env": {
        "BERTH_URL": app.config["PUBLIC_URL"].rstrip("/"), "BERTH_API_KEY": raw}}
    assert "it reads, it changes nothing" in _text(r)
    # The key works, and it is the user's.
    assert app.test_client().get("/api/public/v1/projects", headers=auth(raw)).status_code == 200
    events = list(AuditEvent.select().where(AuditEvent.organization == org.id)
                  .order_by(AuditEvent.created_at))
    actions = [e.action for e in events]
    assert actions == ["user.sign_in", "project.create", "api_key.create"], actions
    for e in events:
        assert (e.actor_type, e.actor_id, e.actor_name) == ("user", str(user.id), user.email)
        assert e.source_ip == "127.0.0.1" and e.request_id
        assert raw not in (e.changes or "") and PASSWORD not in (e.changes or "")
    # The audit page shows them.
    page = _text(b.get("/audit?action=project.create"))
    listed = re.search(r'<ul class="audit">.*?</ul>', page, re.S).group(0)
    assert "project.create" in listed and "api_key.create" not in listed
    # The action is picked from the ones the log holds.
    assert re.findall(r"<option(?: selected)?>([a-z_.]+)</option>", page) == [
        "api_key.create", "project.create", "user.sign_in"]
    assert "<option selected>project.create</option>" in page


def test_pages_of_another_organization_are_not_found(app, world, member):
    _, _, b = member
    stranger = world.org()
    project = world.project(stranger)
    env = world.environment(project)
    for path in (f"/projects/{project.id}", f"/environments/{env.id}",
                 f"/servers/{project.server_id}", f"/environments/{env.id}/history.json"):
        assert b.get(path).status_code == 404, path
    r = b.post(f"/environments/{env.id}/destroy", {"confirm_name": env.name})
    assert r.status_code == 404


@pytest.mark.parametrize("hops", [0, 1])
def test_the_client_address_behind_a_balancer(app, world, hops):
    """With CP_PROXY_HOPS=1 (the compose file's HAProxy), the address its
    X-Forwarded-For names is the client's; with 0 the header is not believed."""
    from control_plane.app import create_app

    behind = create_app({k: app.config[k] for k in ("DATA_DIR", "SECRET_KEY", "DATABASE_URL",
                                                     "PROXY_IMAGE")} | {"PROXY_HOPS": hops})
    user = _user(world, world.org())
    r = behind.test_client().post(
        "/sign-in", data={"email": user.email, "password": PASSWORD},
        headers={"Origin": HOST, "X-Forwarded-For": "203.0.113.7"},
        environ_base={"REMOTE_ADDR": "10.0.0.2"})
    assert r.status_code == 303
    event = AuditEvent.get(AuditEvent.action == "user.sign_in", AuditEvent.actor_id == str(user.id))
    assert event.source_ip == ("203.0.113.7" if hops else "10.0.0.2")


def test_refused_inputs_change_nothing(app, world, member):
    org, user, b = member
    r = b.post("/keys", {"name": "k", "key_type": "full_access", "project_id": "not-an-id"})
    assert r.status_code == 422 and "one of its projects" in _text(r)
    r = b.post("/keys", {"name": "k", "key_type": "admin"})
    assert r.status_code == 400
    server = world.server(org)
    r = b.post("/projects", {"name": "   ", "server_id": str(server.id)})
    assert r.status_code == 422 and "name" in _text(r)
    r = b.post("/projects", {"name": "ok", "server_id": "nope"})
    assert r.status_code == 422 and "server_id" in _text(r)
    env = world.environment(world.project(org, server))
    r = b.post(f"/environments/{env.id}/restore", {"confirm_name": env.name, "backup_id": "x"})
    assert r.status_code == 422
    r = b.post(f"/environments/{env.id}/config", {"erp_options.workers": "many"})
    assert r.status_code == 422 and "An integer from 0 to 64." in _text(r)
    r = b.post(f"/environments/{env.id}/destroy", {"confirm_name": env.name.upper()})
    assert r.status_code == 422 and "exactly" in _text(r)
    assert not AuditEvent.select().where(AuditEvent.organization == org.id,
                                         AuditEvent.action != "user.sign_in").exists()
    # A live read the server cannot answer is a message in its panel, not an error.
    r = b.get(f"/environments/{env.id}/runtime-logs", headers={"HX-Request": "true"})
    assert r.status_code == 200 and 'role="alert"' in _text(r)


def test_a_user_changes_their_own_password(app, world, member):
    _, user, b = member
    other = Browser(app)
    other.sign_in(user.email)
    r = b.post("/account/password", {"current": "not my password", "new": "x" * 20})
    assert r.status_code == 401 and "current password" in _text(r)
    r = b.post("/account/password", {"current": PASSWORD, "new": "short"})
    assert r.status_code == 422
    assert other.get("/projects").status_code == 200  # nothing changed yet
    assert b.post("/account/password", {"current": PASSWORD, "new": "x" * 20}
                  ).status_code == 303
    assert b.get("/projects").status_code == 200  # this browser stays signed in
    assert other.get("/projects").status_code == 302  # the other one is signed out
    # The changes counted against the e-mail's sign-in limit (5 a minute) with the two
    # sign-ins: a fresh window for the last checks.
    app.extensions["berth"].limiter.reset()
    assert Browser(app).sign_in(user.email).status_code == 401
    assert Browser(app).sign_in(user.email, password="x" * 20).status_code == 303


def test_text_no_database_can_store_is_refused_before_anything(app, world, member):
    """A NUL in a form field is a 400, as in the APIs' bodies, on both databases;
    nothing is stored."""
    org, user, b = member
    server = world.server(org)
    r = b.post("/projects", {"name": "a\x00b", "server_id": str(server.id)})
    assert r.status_code == 400 and "NUL" in _text(r)
    env = world.environment(world.project(org, server))
    r = b.post(f"/environments/{env.id}/config", {"new.0.name": "A", "new.0.value": "x\x00y"})
    assert r.status_code == 400
    assert Environment.get_by_id(env.id).variables in (None, {})
    assert Project.select().where(Project.organization == org.id).count() == 1
    assert not AuditEvent.select().where(AuditEvent.organization == org.id,
                                         AuditEvent.action != "user.sign_in").exists()


def test_assets_are_named_by_content_kept_a_year_and_pages_compressed(app, world, member):
    """A page names its assets with their content's hash; such a name is cached for a
    year (immutable), any other is revalidated. Pages and assets are compressed for a
    browser that says it takes it; the APIs' JSON is not."""
    _, _, b = member
    page = _text(b.get("/projects"))
    assets = re.findall(r'(?:src|href)="(/console-assets/[^"?]+)\?v=([0-9a-f]{16})"', page)
    assert {name.rsplit("/", 1)[1] for name, _ in assets} >= {"console.css", "console.js",
                                                               "htmx.min.js"}
    for path, version in assets:
        r = b.get(f"{path}?v={version}")
        assert r.status_code == 200
        assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable", path
        assert hashlib.sha256(r.get_data()).hexdigest()[:16] == version
        assert "immutable" not in b.get(f"{path}?v=0123456789abcdef").headers.get(
            "Cache-Control", "")
    assert b.get("/console-assets/../app.py?v=x").status_code == 404
    gzipped = b.get("/projects", headers={"Accept-Encoding": "gzip"})
    assert gzipped.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in gzipped.headers["Vary"]
    assert gzip.decompress(gzipped.get_data()).decode() == page
    css = b.get(assets[0][0] + f"?v={assets[0][1]}", headers={"Accept-Encoding": "br"})
    assert css.headers.get("Content-Encoding") in ("br", None)  # small files may go as they are
    raw, _ = world.key(world.org())
    api = b.client.get("/api/public/v1/projects", headers={**auth(raw), "Accept-Encoding": "gzip"})
    assert api.status_code == 200 and "Content-Encoding" not in api.headers
