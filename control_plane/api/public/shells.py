"""Shell sessions: /environments/{id}/shell-sessions. A POST opens one and answers a
single-use ticket; the bytes then flow over a WebSocket (control_plane/shell_socket.py,
not in this document: OpenAPI does not describe WebSockets)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.public.monitoring import live_errors
from control_plane.api.smorest import Blueprint
from control_plane.services.servers import shells as svc

blp = Blueprint("shell_sessions", __name__, description=(
    "Shells into an environment's ERP container: its shell, `odoo shell` on its database, "
    "or one command. Full-access keys only; every session is in the audit log."))

STREAM = ("/api/public/v1/shell-sessions/{id}/stream: open a WebSocket there and send, within "
          "30 s, the text message `{\"ticket\": \"...\"}` (with `rows` and `cols` for a "
          "terminal). Binary messages carry bytes, their first byte the channel: 0 input, "
          "1 output, 2 error output. Text messages are JSON: from the client `resize` (rows, "
          "cols), `eof` (pipes only) and `close`; from the server `opened`, then `exit` "
          "(exit_code) or `error` (code, message) before it closes. docs/decisions.md, "
          "Shell sessions, has it whole.")


class ShellOpenSchema(ma.Schema):
    odoo = ma.fields.Boolean(load_default=False, metadata={
        "description": "`odoo shell -d <database>` instead of the container's shell."})
    command = ma.fields.List(
        ma.fields.String(validate=ma.validate.Length(1, 4096)), load_default=None,
        validate=ma.validate.Length(1, svc.COMMAND_MAX), metadata={
            "description": "One command (its arguments, run without a shell) instead of an "
                           "interactive shell."})
    tty = ma.fields.Boolean(load_default=True, metadata={
        "description": "A terminal (resizable, Ctrl-C as a byte). Without one, input and "
                       "output are plain pipes and error output comes apart."})


class ShellSessionSchema(Schema):
    id = ma.fields.UUID(required=True)
    environment_id = ma.fields.UUID(required=True)
    server_id = ma.fields.UUID(required=True)
    actor_type = ma.fields.String(required=True)
    actor_name = ma.fields.String(required=True, allow_none=True)
    source_ip = ma.fields.String(required=True, allow_none=True)
    odoo = ma.fields.Boolean(required=True)
    command = ma.fields.List(ma.fields.String(), required=True, allow_none=True)
    tty = ma.fields.Boolean(required=True)
    created_at = UTCDateTime(required=True)
    started_at = UTCDateTime(required=True, allow_none=True)
    ended_at = UTCDateTime(required=True, allow_none=True)
    exit_code = ma.fields.Integer(required=True, allow_none=True)
    end_reason = ma.fields.String(required=True, allow_none=True, metadata={
        "enum": ["exited", "closed", "idle", "too_long", "disconnected", "failed", "expired"],
        "description": "exited: the command ended (exit_code); closed: the client hung up; "
                       "idle, too_long: the server's limits; disconnected: the agent's "
                       "stream was lost; failed: it could not start."})


class ShellOpenedSchema(ShellSessionSchema):
    ticket = ma.fields.String(required=True, metadata={
        "description": "Single-use, valid 30 s, shown once: the stream's first message."})
    stream_path = ma.fields.String(required=True)
    expires_at = UTCDateTime(required=True)


class ShellDetailSchema(ShellSessionSchema):
    transcript = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "What the session showed (its first MiB), when the control plane "
                       "keeps transcripts (CP_SHELL_TRANSCRIPTS); else null."})
    transcript_truncated = ma.fields.Boolean(required=True)


class ShellListSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    sessions = ma.fields.List(ma.fields.Nested(ShellSessionSchema), required=True)


class ShellListArgs(ma.Schema):
    limit = ma.fields.Integer(load_default=50, validate=ma.validate.Range(1, 200))


def stream_path(session_id):
    return f"/api/public/v1/shell-sessions/{session_id}/stream"


@blp.route("/environments/<uuid:env_id>/shell-sessions")
class ShellSessions(MethodView):
    @live_errors((409, "`shell_limit_reached`: the server has CP_SHELL_SESSIONS_PER_SERVER "
                       "sessions open; `no_server`; `environment_not_ready`"))
    @blp.arguments(ShellOpenSchema, required=False)  # every field has a default
    @blp.response(201, ShellOpenedSchema, description=STREAM)
    def post(self, args, env_id):
        """Open a shell session (permission `project.environments.shell` for users; 30 a
        minute per environment). The answer's ticket starts its stream."""
        row, ticket = svc.open_session(current_actor(), env_id, current_berth(), **args)
        row.ticket, row.stream_path = ticket, stream_path(row.id)  # shown this once
        return row

    @blp.arguments(ShellListArgs, location="query")
    @blp.response(200, ShellListSchema)
    def get(self, args, env_id):
        """The environment's shell sessions, newest first."""
        return {"environment_id": env_id,
                "sessions": svc.sessions(current_actor(), env_id, args["limit"])}


@blp.route("/environments/<uuid:env_id>/shell-sessions/<uuid:session_id>")
class ShellSessionById(MethodView):
    @blp.response(200, ShellDetailSchema)
    def get(self, env_id, session_id):
        """One session: who, when, its exit code and, if kept, its transcript."""
        return svc.session(current_actor(), env_id, session_id)
