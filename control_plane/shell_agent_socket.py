"""The agent's end of a shell session on a WebSocket of its own
(/agent/v1/shell-sessions/{id}/stream): the session's ShellFrames, serialized, one to
a binary message, both ways (agent/shell_stream.py is the other end).

Why beside the agent's gRPC stream: gRPC's Python library spends ~0.6-0.9 ms of CPU a
message on each side at a person's typing pace, which bounded a keystroke's round
trip once many sessions typed at once; here a keystroke is two WebSocket messages
on this server's event loop, the client's socket beside it. The stream still opens
and hangs up the session.

The client's socket (shell_socket.ShellSocket) `expect`s the agent here and puts the
ticket in its ShellOpen: random, single use, kept as a digest in this process for
TICKET_SECONDS. A socket for a session this process does not hold (behind a balancer,
another web process may) is refused with a 404 before the upgrade, and the agent
keeps to its stream."""

import asyncio
import hashlib
import hmac
import json
import secrets
import time

from tornado.websocket import WebSocketClosedError, WebSocketHandler

from protocol.v1 import agent_pb2 as pb

PATH = "/agent/v1/shell-sessions/"
ROUTE = PATH.rstrip("/") + r"/([0-9a-fA-F-]{36})/stream"
TICKET_SECONDS = 30.0
MAX_MESSAGE = 256 * 1024  # a frame of output (the agent reads 64 KiB at once)

# session id -> (the ticket's digest, its deadline, the client's socket). Only this
# process's event loops touch it, and a claim checks the loop is the client's.
_expected = {}


def expect(client):
    """A ticket for the agent's socket of `client`'s session (its `session_id`)."""
    ticket = secrets.token_urlsafe(32)
    _expected[client.session_id] = (_digest(ticket), time.monotonic() + TICKET_SECONDS, client)
    return ticket


def forget(session_id):
    _expected.pop(session_id, None)


def stream_url(public_url, session_id):
    base = public_url.rstrip("/")
    return "ws" + base[len("http"):] + PATH + session_id + "/stream" \
        if base.startswith("http") else ""


def _digest(ticket):
    return hashlib.sha256(ticket.encode()).digest()


def _claim(session_id, authorization):
    """The waiting client socket `authorization` lets in, once; else None."""
    held = _expected.get(session_id)
    scheme, _, ticket = (authorization or "").partition(" ")
    if held is None or scheme.lower() != "bearer" or not ticket:
        return None
    digest, deadline, client = held
    if not hmac.compare_digest(digest, _digest(ticket.strip())):
        return None
    del _expected[session_id]
    if time.monotonic() > deadline or client.done:
        return None
    try:
        if client.loop is not asyncio.get_running_loop():
            return None  # another server's loop in this process: its socket is not ours
    except RuntimeError:
        return None
    return client


class AgentShellSocket(WebSocketHandler):
    def initialize(self):
        self.client = None

    def prepare(self):
        """Before the upgrade, so a refusal is a plain answer (the agent falls back)."""
        self.client = _claim(self.path_args[0], self.request.headers.get("Authorization"))
        if self.client is None:
            self.set_status(404)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"error": "not_found", "message": "No shell session "
                                    "here waits for this ticket."}))

    def open(self, session_id):
        self.set_nodelay(True)
        self.client.agent_socket(self)

    def on_message(self, message):
        if not isinstance(message, bytes):
            return
        try:
            frame = pb.ShellFrame.FromString(message)
        except Exception:  # not a frame: this socket is not the agent's
            self.close(1003, "not a frame")
            return
        self.client.agent_frame(frame)

    def send(self, frame):
        """(On the loop.) A frame for the agent."""
        try:
            self.write_message(frame.SerializeToString(), binary=True)
        except WebSocketClosedError:
            pass

    def on_close(self):
        if self.client is not None:
            self.client.agent_socket_closed()
