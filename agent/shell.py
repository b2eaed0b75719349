"""Shell sessions in an environment's ERP container: an interactive terminal, `odoo
shell` on its database, or one command, run by the container engine's exec and
carried as ShellFrames on the session's own WebSocket to the control plane
(agent/shell_stream.py) or else on the agent's stream (`Shells`, for the daemon), or
on an SSH session's own terminal (`on_terminal`, for `berth-agent shell` over SSH).

Nothing a session started runs after its end: the engine does not stop an exec
whose client went away (its process would live on in the container), so the
agent hangs it up itself, SIGHUP to its process group then SIGKILL, from the host
(the engine reports the exec's host process id)."""

import logging
import os
import signal
import socket
import threading
import time

from agent import shell_stream
from agent.errors import AgentError, ContainerNotFound, engine_errors
from protocol.errors import AgentErrorCode
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.agent")

ODOO_CONF = "/etc/odoo/odoo.conf"  # where the deploy mounts the ERP's configuration
DATABASE = "odoo"  # the ERP's database (db_name in that configuration)
# The container's shell: bash where the image has it, else sh.
SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"]
ODOO_SHELL = ["odoo", "shell", "-c", ODOO_CONF, "-d", DATABASE, "--no-http"]
MAX_SESSIONS = 32  # on this server at once (the control plane's own limit is lower)
CHUNK = 64 * 1024  # the most output read, and sent as one frame, at once
QUEUED_MAX = 256  # output frames waiting for the stream before a session's reader waits
HANGUP_GRACE = 2.0  # seconds between SIGHUP and SIGKILL


def command_for(odoo, command):
    if command:
        return list(command)
    return list(ODOO_SHELL if odoo else SHELL)


class ShellExec:
    """One exec in an environment's running ERP container, its standard streams on
    the engine's socket."""

    def __init__(self, docker, environment_id, cmd, tty, rows=0, cols=0):
        from agent.deploy.environments import Environments

        self.api, self.tty = docker.api, tty
        name = Environments(docker)._names(environment_id)["erp"]
        try:
            with engine_errors():
                running = docker.containers.get(name).status == "running"
        except ContainerNotFound:
            running = False
        if not running:
            raise ContainerNotFound("the environment's ERP container is not running")
        with engine_errors():
            env = {"TERM": "xterm-256color"} if tty else None
            self.id = self.api.exec_create(name, cmd, stdin=True, stdout=True, stderr=True,
                                           tty=tty, environment=env)["Id"]
            self.sock = self.api.exec_start(self.id, tty=tty, socket=True)
        self.raw = getattr(self.sock, "_sock", self.sock)
        self.raw.settimeout(None)
        response = getattr(self.sock, "_response", None)
        try:  # the first bytes may already be in the HTTP response's buffer
            self.reader = response.raw._fp.fp
        except AttributeError:
            self.reader = None
        if tty and rows and cols:
            self.resize(rows, cols)

    def _read(self, n):
        if self.reader is not None:
            return self.reader.read1(n)
        return self.raw.recv(n)

    def _exact(self, n):
        out = b""
        while len(out) < n:
            data = self._read(n - len(out))
            if not data:
                return None
            out += data
        return out

    def output(self):
        """(is_stderr, bytes) until the command's output ends: with a terminal the
        engine's raw bytes, without its multiplexed frames."""
        from agent.backups.exec_stream import demultiplexed

        try:
            if not self.tty:
                for kind, data in demultiplexed(self._read, self._exact, CHUNK):
                    yield kind == 2, data
                return
            while data := self._read(CHUNK):
                yield False, data
        except (OSError, ValueError):  # closed under us: the session was hung up
            return

    def write(self, data):
        try:
            self.raw.sendall(data)
        except OSError:
            pass  # the command has ended: its output's end says so

    def eof(self):
        try:
            self.raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def resize(self, rows, cols):
        if self.tty and rows and cols:
            try:
                self.api.exec_resize(self.id, height=rows, width=cols)
            except Exception as exc:  # a resize racing the end is not an error
                log.debug("shell resize failed: %s", exc)

    def exit_code(self, wait=5.0):
        """The command's exit code once the engine says it ended (None if it did
        not within `wait` seconds)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                state = self.api.exec_inspect(self.id)
            except Exception:
                return None
            if not state.get("Running"):
                return state.get("ExitCode")
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def hang_up(self):
        """End the command and whatever it started in its process group."""
        try:
            state = self.api.exec_inspect(self.id)
        except Exception:
            state = {}
        pid = state.get("Pid") if state.get("Running") else None
        if pid:
            _signal(pid, signal.SIGHUP)
            if self.exit_code(HANGUP_GRACE) is None:
                _signal(pid, signal.SIGKILL)
        self.close()

    def close(self):
        for closing in (self.sock, self.raw):
            try:
                closing.close()
            except Exception:
                pass


def _signal(pid, sig):
    for send in (lambda: os.killpg(os.getpgid(pid), sig), lambda: os.kill(pid, sig)):
        try:
            send()
        except (ProcessLookupError, PermissionError, OSError):
            continue


class Shells:
    """The daemon's open sessions, by id. `send` puts an AgentMessage on the stream;
    `pending` says how many wait there (a fast command waits for a slow stream)."""

    def __init__(self, agent, send, pending):
        self.agent, self.send, self.pending = agent, send, pending
        self.open_ = {}
        self.lock = threading.Lock()

    def open(self, request):
        """A ShellOpen: the exec starts in the session's own thread."""
        threading.Thread(target=self._run, args=(request,), name="berth-shell",
                         daemon=True).start()

    def _run(self, request):
        sid = request.session_id
        try:
            with self.lock:
                if len(self.open_) >= MAX_SESSIONS:
                    raise AgentError(f"this server has {MAX_SESSIONS} shell sessions open")
                self.open_[sid] = None  # reserved while the exec starts
            session = ShellExec(self.agent.docker(), request.environment_id,
                                command_for(request.odoo, request.command), request.tty,
                                request.rows, request.cols)
        except Exception as exc:
            with self.lock:
                self.open_.pop(sid, None)
            code = exc.code if isinstance(exc, AgentError) else AgentErrorCode.UNAVAILABLE
            self._on_stream(pb.ShellFrame(session_id=sid, error_code=code,
                                          error_message=str(exc)))
            return
        with self.lock:
            closed = sid not in self.open_  # hung up while it started
            self.open_[sid] = session
        if closed:
            session.hang_up()
            return
        own = shell_stream.dial(request.stream_url, request.stream_ticket) \
            if request.stream_ticket else None
        if own is not None:
            threading.Thread(target=self._take, args=(sid, own), name="berth-shell-in",
                             daemon=True).start()
        send = own.send if own is not None else self._on_stream
        send(pb.ShellFrame(session_id=sid, opened=True))
        for is_err, data in session.output():
            while own is None and self.pending() > QUEUED_MAX:
                time.sleep(0.01)
            if not send(pb.ShellFrame(session_id=sid, data=data, stderr=is_err)):
                break  # its socket is gone: `_take` hangs the session up
        code = session.exit_code()
        with self.lock:
            ended_here = self.open_.pop(sid, None) is not None
        session.close()
        if ended_here:
            send(pb.ShellFrame(session_id=sid, exited=True, exit_code=-1 if code is None else code))
        if own is not None:
            own.close()

    def _on_stream(self, frame):
        self.send(pb.AgentMessage(shell=frame))
        return True

    def _take(self, sid, own):
        """The control plane's frames on the session's own socket; its end, before
        the session's, hangs the session up (nobody reads it any more)."""
        for frame in own.frames():
            frame.session_id = sid
            self.input(frame)
        with self.lock:
            session = self.open_.pop(sid, None)
        if session is not None:
            session.hang_up()

    def input(self, frame):
        """A ShellFrame from the control plane: input, a resize, its end or a hang-up."""
        with self.lock:
            session = self.open_.get(frame.session_id)
            if frame.close:
                self.open_.pop(frame.session_id, None)
        if session is None:
            return
        if frame.close:
            threading.Thread(target=session.hang_up, daemon=True).start()
            return
        if frame.rows and frame.cols:
            session.resize(frame.rows, frame.cols)
        if frame.data:
            session.write(frame.data)
        if frame.eof:
            session.eof()

    def close_all(self):
        """The stream ended: every session is hung up (nobody reads them any more)."""
        with self.lock:
            sessions, self.open_ = [s for s in self.open_.values() if s], {}
        for session in sessions:
            threading.Thread(target=session.hang_up, daemon=True).start()
