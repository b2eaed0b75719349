"""The console's shell page, on both databases: only a full-access user with the
permission `project.environments.shell` is linked to it, may see it and may open a
session (others get the console's refusal, another organization's environment is not
found); opening answers the ticket and stream as JSON, a production environment's
name must be typed first, and the page alone allows inline styles (xterm.js).
(test_console_shell_browser.py: the terminal itself, in a real browser.)"""

import re

from control_plane.console import CSP
from control_plane.console.shells import SHELL_CSP
from control_plane.models import Environment, ShellSession
from control_plane.services.servers.shells import PERMISSION
from tests.control_plane.console.test_console import Browser, _text, _user

DEPLOY = "project.environments.deploy"


def _signed_in(app, world, org, access="full_access", permissions=(DEPLOY, PERMISSION)):
    b = Browser(app)
    assert b.sign_in(_user(world, org, access, permissions).email).status_code == 303
    return b


def _shell_link(b, env):
    page = _text(b.get(f"/environments/{env.id}"))
    return f'href="/environments/{env.id}/shell">Shell</a>' in page


def test_only_a_full_access_user_with_the_permission_gets_the_shell(app, world):
    org = world.org()
    env = world.environment(world.project(org))
    for b, status in ((_signed_in(app, world, org, permissions=(DEPLOY,)), 403),
                      (_signed_in(app, world, org, "read_only"), 403)):
        assert not _shell_link(b, env)
        r = b.get(f"/environments/{env.id}/shell")
        assert r.status_code == status and 'role="alert"' in _text(r), _text(r)
        r = b.post(f"/environments/{env.id}/shell-sessions", {"kind": "shell"})
        assert r.status_code == 403, _text(r)
    assert ShellSession.select().count() == 0

    b = _signed_in(app, world, org)
    assert _shell_link(b, env)
    r = b.get(f"/environments/{env.id}/shell")
    assert r.status_code == 200 and r.headers["Content-Security-Policy"] == SHELL_CSP
    assert "style-src 'self' 'unsafe-inline'" in SHELL_CSP and "connect-src 'self'" in SHELL_CSP
    assert b.get(f"/environments/{env.id}").headers["Content-Security-Policy"] == CSP
    page = _text(r)
    assert 'name="confirm_name"' not in page and "vendor/xterm.js?v=" in page

    # Another organization's environment is not found, its shell neither.
    other = world.environment(world.project(world.org()))
    assert b.get(f"/environments/{other.id}/shell").status_code == 404
    assert b.post(f"/environments/{other.id}/shell-sessions", {"kind": "shell"}).status_code == 404


def test_opening_answers_the_ticket_and_a_production_name_is_typed_first(app, world):
    org = world.org()
    project = world.project(org)
    env, prod = world.environment(project), world.environment(project)
    Environment.update(environment_type="production").where(Environment.id == prod.id).execute()
    b = _signed_in(app, world, org)

    r = b.post(f"/environments/{env.id}/shell-sessions", {"kind": "odoo"})
    assert r.status_code == 201, _text(r)
    opened = r.get_json()
    row = ShellSession.get_by_id(opened["id"])
    assert opened["ticket"].startswith("shk_") and row.odoo and row.tty
    assert opened["stream_path"] == f"/api/public/v1/shell-sessions/{row.id}/stream"
    assert row.actor_type == "user" and row.environment_id == env.id

    # Without the token, the console's refusal (nothing opened).
    r = b.post(f"/environments/{env.id}/shell-sessions", {"kind": "shell"}, token=False)
    assert r.status_code == 403
    r = b.post(f"/environments/{env.id}/shell-sessions", {"kind": "bash"})
    assert r.status_code == 422 and r.get_json()["error"] == "validation_error"

    page = _text(b.get(f"/environments/{prod.id}/shell"))
    assert re.search(r'<input id="confirm-name" name="confirm_name" required', page)
    for typed in (None, "", prod.name.upper(), "other"):
        r = b.post(f"/environments/{prod.id}/shell-sessions",
                   {"kind": "shell", **({"confirm_name": typed} if typed is not None else {})})
        assert r.status_code == 422, _text(r)
        assert r.get_json()["message"] == f"Type the name, {prod.name}, exactly to open its shell."
    assert ShellSession.select().where(ShellSession.environment == prod.id).count() == 0
    r = b.post(f"/environments/{prod.id}/shell-sessions",
               {"kind": "shell", "confirm_name": f" {prod.name} "})
    assert r.status_code == 201 and not ShellSession.get_by_id(r.get_json()["id"]).odoo

    # An environment not deployed yet: the service's refusal, as JSON for the page.
    stopped = world.environment(project, status="pending")
    r = b.post(f"/environments/{stopped.id}/shell-sessions", {"kind": "shell"})
    assert r.status_code == 409 and r.get_json()["error"] == "environment_not_ready", _text(r)
    assert "pending" in r.get_json()["message"]
    listed = _text(b.get(f"/environments/{env.id}/shell"))
    assert "Odoo shell" in listed and "not started" in listed
