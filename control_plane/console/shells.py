"""An environment's terminal in the console: a page with xterm.js (static/shell.js) that
opens a shell session here (the user's own permission `project.environments.shell` and
full access, as the API asks) and carries it over the session's WebSocket
(control_plane/shell_socket.py), authenticated by the ticket this page's POST answers.
A production environment's name must be typed before its shell opens.

xterm.js writes `<style>` elements and style attributes as it lays the terminal out, so
this page alone allows inline styles (SHELL_CSP); its scripts are this origin's only,
as on every page."""

from flask import g, jsonify, request

from control_plane.api.public.shells import stream_path
from control_plane.console import CSP, actor, berth, blp, render
from control_plane.services.deploys import environments as envs
from control_plane.services.servers import shells
from control_plane.vocabulary.errors import ApiError, WriteAccessRequired
from control_plane.vocabulary.errors import Unprocessable as FormInvalid

SHELL_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
KINDS = {"shell": False, "odoo": True}  # the form's choice: `odoo shell` or not


def _allowed(env_id):
    """The environment, to a user who may open its shell: another organization's is 404,
    a user without the permission or with read-only access 403."""
    env = envs.get_environment(actor(), env_id)
    actor().require(shells.PERMISSION)
    if actor().read_only:
        raise WriteAccessRequired("A shell needs full access.")
    return env


def may_open(user):
    """Whether the environment page links the shell for this user."""
    return not user.read_only and shells.PERMISSION in (user.permissions or ())


@blp.get("/environments/<uuid:env_id>/shell")
def shell_page(env_id):
    env = _allowed(env_id)
    g.csp = SHELL_CSP
    return render("shell.html", env=env, sessions=shells.sessions(actor(), env_id, 10),
                  production=env.environment_type == "production")


@blp.post("/environments/<uuid:env_id>/shell-sessions")
def open_shell(env_id):
    """A new session's ticket and stream, as JSON for the page's script; a refusal as
    JSON too (its message is shown on the page)."""
    try:
        env = _allowed(env_id)
        kind = request.form.get("kind", "shell")
        if kind not in KINDS:
            raise FormInvalid("Choose a shell or the Odoo shell.")
        if env.environment_type == "production" \
                and request.form.get("confirm_name", "").strip() != env.name:
            raise FormInvalid(f"Type the name, {env.name}, exactly to open its shell.")
        row, ticket = shells.open_session(actor(), env_id, berth(), odoo=KINDS[kind], tty=True)
    except ApiError as err:
        return jsonify({"error": err.code, "message": err.message}), err.status, err.headers
    return jsonify({"id": str(row.id), "ticket": ticket, "stream_path": stream_path(row.id),
                    "odoo": row.odoo}), 201


@blp.context_processor
def _context():
    return {"may_open_shell": may_open}
