"""The WebSocket of a shell session (/api/public/v1/shell-sessions/{id}/stream), on the
HTTP server's event loop: one socket costs no worker thread while it is open.

The first message is the ticket `POST .../shell-sessions` answered (the session's
rules were checked there); then bytes flow between the socket and the agent: on the
agent's own socket to this loop when it opens one (shell_agent_socket.py), else
through the agent link.
Binary messages start with their channel, as Kubernetes' exec streams do: 0 input,
1 output, 2 error output. Text messages are JSON: `resize`, `eof`, `close` from the
client; `opened`, then `exit` or `error` from here, and the socket closes. The
session ends when the command exits, the client goes, the agent's stream is lost, or
after CP_SHELL_IDLE_SECONDS without a byte either way or CP_SHELL_MAX_SECONDS in all."""

import asyncio
import json
import logging
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor

from tornado.web import Application
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from control_plane import shell_agent_socket
from control_plane.agent_link import NotConnected, ShellUnsupported
from control_plane.infra import handoff
from control_plane.infra.observability import SHELL_SESSIONS
from control_plane.services.servers import shells
from protocol.errors import AgentErrorCode
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.shell")

PATH = "/api/public/v1/shell-sessions/"
TICKET_WAIT = 10.0  # seconds from the socket's opening to its ticket
INPUT, OUTPUT, ERROR = 0, 1, 2
MAX_MESSAGE = 1024 * 1024  # a client's message
UNSENT_MAX = 1024  # output messages the client has not taken: it is too slow
# Database work (a ticket, a session's end) off the event loop, apart from the HTTP
# workers so a busy API never holds a shell's start.
_work = ThreadPoolExecutor(4, thread_name_prefix="berth-shell")

CLOSED_BY_AGENT = {
    AgentErrorCode.CONTAINER_NOT_FOUND: ("environment_not_ready",
                                         "The environment's ERP container is not running."),
    # The Redis relay's word (gateway/shells.py) for ShellUnsupported on the far side.
    "shell_unsupported": ("shell_unavailable", "This server's agent is of a release without "
                                               "shell sessions: upgrade it."),
}


def application(app):
    """The tornado application that answers the shell sockets of Flask app `app`."""
    return Application([(PATH.rstrip("/") + r"/([0-9a-fA-F-]{36})/stream", ShellSocket,
                         {"app": app}),
                        (shell_agent_socket.ROUTE, shell_agent_socket.AgentShellSocket)],
                       websocket_max_message_size=MAX_MESSAGE)


def wants(start_line, headers):
    """Whether a request is a shell socket's, a client's or an agent's (the HTTP
    server routes it here)."""
    return (start_line.path.startswith((PATH, shell_agent_socket.PATH))
            and headers.get("Upgrade", "").lower() == "websocket")


class ShellSocket(WebSocketHandler):
    def initialize(self, app):
        self.app, self.settings_ = app, app.config
        self.row, self.pipe, self.opened, self.done = None, None, False, False
        self.own = None  # the agent's socket for this session (shell_agent_socket.py)
        self.pipe_closed = False
        self.pending_input = []  # input sent before the agent said `opened`
        self.transcript = bytearray() if self.settings_["SHELL_TRANSCRIPTS"] else None
        self.unsent = 0
        self.timers = []

    def open(self, session_id):
        self.set_nodelay(True)  # keystrokes are small: never wait to fill a packet
        self.loop = asyncio.get_running_loop()
        self.handoff = handoff.of(self.loop)  # the agent's frames: many to a wake-up
        self.session_id = session_id
        self.timers.append(self.loop.call_later(TICKET_WAIT, self._no_ticket))

    def _no_ticket(self):
        if self.row is None:
            self._refuse("invalid_ticket", "No ticket was given in time.")

    def _refuse(self, code, message):
        self._send_json({"type": "error", "code": code, "message": message})
        self.done = True
        self.close(4001 if code == "invalid_ticket" else 1011, code)

    def on_message(self, message):
        """Plain, not a coroutine: a keystroke costs no task (tornado awaits what this
        returns, the start's coroutine only)."""
        if self.done:
            return None
        if self.row is None:
            return self._start(message)
        if isinstance(message, bytes):
            if message[:1] == bytes([INPUT]) and len(message) > 1:
                self._input(pb.ShellFrame(data=message[1:]))
            return
        try:
            said = json.loads(message)
        except ValueError:
            return
        kind = said.get("type") if isinstance(said, dict) else None
        if kind == "resize":
            rows, cols = _size(said.get("rows")), _size(said.get("cols"))
            if rows and cols:
                self._input(pb.ShellFrame(rows=rows, cols=cols))
        elif kind == "eof":
            self._input(pb.ShellFrame(eof=True))
        elif kind == "close":
            self._hang_up("closed")
        return None

    async def _start(self, message):
        try:
            said = json.loads(message) if isinstance(message, str) else {}
            ticket = said.get("ticket") if isinstance(said, dict) else None
            row = await self.loop.run_in_executor(
                _work, shells.attach, uuid.UUID(self.session_id), str(ticket or ""))
        except ValueError:
            row = None
        if row is None:
            self._refuse("invalid_ticket", "The ticket is not valid for this session "
                                           "(used, expired, or another session's).")
            return
        self.row = row
        self.active_at = self.started = time.monotonic()
        opening = pb.ShellOpen(session_id=str(row.id), environment_id=str(row.environment_id),
                               odoo=row.odoo, command=row.command or [], tty=row.tty,
                               rows=_size(said.get("rows")) or 24,
                               cols=_size(said.get("cols")) or 80)
        own_url = shell_agent_socket.stream_url(self.settings_.get("PUBLIC_URL") or "",
                                                self.session_id)
        if own_url:  # the agent may carry the bytes on a socket of their own
            opening.stream_url, opening.stream_ticket = own_url, shell_agent_socket.expect(self)
        link = self.app.extensions["berth"].gateway
        try:
            self.pipe = await self.loop.run_in_executor(
                _work, link.shell, row.server_id, opening, self._from_agent)
        except NotConnected:
            self._end("failed", error=("server_unreachable",
                                       "The server's agent could not be reached."))
            return
        except ShellUnsupported:
            self._end("failed", error=("shell_unavailable", "This server's agent is of a "
                                       "release without shell sessions: upgrade it."))
            return
        self._tick()
        _alive(self.loop).add(self.row.id)

    def _from_agent(self, frame):
        """(Any thread.) A frame from the agent's stream, handled on this socket's loop."""
        self.handoff.call(self.agent_frame, frame)

    def agent_socket(self, own):
        """(On the loop.) The agent's socket for this session came: its frames
        come and go there from now on."""
        if self.done:
            own.close()
        else:
            self.own = own

    def agent_socket_closed(self):
        if not self.done:  # before the session's end: the agent's side is lost
            self._end("disconnected", error=("server_unreachable",
                                             "The server's agent's shell socket was lost."))

    def agent_frame(self, frame):
        """(On the loop.) A frame from the agent, on its stream or its socket."""
        if self.done:
            return
        if frame.opened:
            self.opened = True
            SHELL_SESSIONS.labels(via="socket" if self.own is not None else "stream").inc()
            self._send_json({"type": "opened", "session_id": self.session_id})
            for queued in self.pending_input:
                self._to_agent(queued)
            self.pending_input = []
        if frame.data:
            self.active_at = time.monotonic()
            if self.transcript is not None and len(self.transcript) <= shells.TRANSCRIPT_MAX:
                self.transcript += frame.data
            self._send(bytes([ERROR if frame.stderr else OUTPUT]) + frame.data, binary=True)
        if frame.exited:
            self._end("exited", exit_code=frame.exit_code)
        elif frame.error_code:
            code, message = CLOSED_BY_AGENT.get(frame.error_code, (
                "server_unreachable", frame.error_message or "The server's agent failed."))
            self._end("failed" if not self.opened else "disconnected", error=(code, message))

    def _input(self, frame):
        self.active_at = time.monotonic()
        if self.opened:
            self._to_agent(frame)
        else:  # (after the ticket: this is only called with a session)
            self.pending_input.append(frame)

    def _to_agent(self, frame):
        (self.own or self.pipe).send(frame)

    def _close_pipe(self):
        """The agent hangs up (a no-op if the session ended there); the gateway forgets
        the session."""
        if self.pipe is not None and not self.pipe_closed:
            self.pipe_closed = True
            self.pipe.send(pb.ShellFrame(close=True))

    def _send(self, data, binary=False):
        try:
            sent = self.write_message(data, binary=binary)
        except WebSocketClosedError:
            return
        self.unsent += 1
        sent.add_done_callback(self._taken)
        if self.unsent > UNSENT_MAX:  # the client does not keep up: never buffer without end
            self._hang_up("closed", error=("client_too_slow",
                                           "The client did not keep up with the output."))

    def _taken(self, _):
        self.unsent -= 1

    def _send_json(self, message):
        self._send(json.dumps(message))

    def _tick(self):
        """The idle and total limits, looked at every few seconds."""
        if self.done:
            return
        now = time.monotonic()
        if now - self.active_at > self.settings_["SHELL_IDLE_SECONDS"]:
            self._hang_up("idle", error=("shell_idle_timeout",
                                         "The session was idle too long and was closed."))
        elif now - self.started > self.settings_["SHELL_MAX_SECONDS"]:
            self._hang_up("too_long", error=("shell_max_duration",
                                             "The session reached its longest time."))
        else:
            every = min(5.0, self.settings_["SHELL_IDLE_SECONDS"] / 4)
            self.timers.append(self.loop.call_later(every, self._tick))


    def _hang_up(self, reason, error=None):
        if not self.done:
            self._close_pipe()
        self._end(reason, error=error)

    def _end(self, reason, exit_code=None, error=None):
        if self.done:
            return
        self.done = True
        for timer in self.timers:
            timer.cancel()
        _alive(self.loop).discard(self.row.id)
        shell_agent_socket.forget(self.session_id)
        if self.own is not None:  # its end came there: the stream's side is told too
            self._close_pipe()
            self.own.close()
        if error is not None:
            self._send_json({"type": "error", "code": error[0], "message": error[1]})
        elif reason == "exited":
            self._send_json({"type": "exit", "exit_code": exit_code})
        transcript = bytes(self.transcript) if self.transcript is not None else None
        future = self.loop.run_in_executor(_work, shells.end, self.row.id, reason, exit_code,
                                           transcript)
        future.add_done_callback(_logged)
        self.close(1000 if error is None else 1011)

    def on_close(self):
        if self.row is not None and not self.done:
            self._hang_up("closed")
        self.done = True
        for timer in self.timers:
            timer.cancel()


# The sessions open on each loop, said alive together every SEEN_SECONDS: one write
# for all of them (housekeeping ends those of a web process that stopped saying so).
# One write each, a hundred sessions opened at once wrote a hundred times at once.
_open_on = weakref.WeakKeyDictionary()


def _alive(loop):
    ids = _open_on.get(loop)
    if ids is None:
        ids = _open_on[loop] = set()
        loop.call_later(shells.SEEN_SECONDS, _say_alive, loop, ids)
    return ids


def _say_alive(loop, ids):
    if ids:
        loop.run_in_executor(_work, shells.seen, list(ids)).add_done_callback(_logged)
    loop.call_later(shells.SEEN_SECONDS, _say_alive, loop, ids)


def _logged(future):
    if future.exception() is not None:
        log.error("recording a shell session failed: %s", future.exception())


def _size(value):
    return value if isinstance(value, int) and 0 < value <= 1000 else 0
