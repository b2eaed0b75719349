"""Shell sessions on servers reached over SSH: `berth-agent shell` (agent/over_ssh.py)
on an SSH session of its own, with a terminal when the session asks for one, its
bytes carried as the ShellFrames of `AgentLink.shell` (agent_link.py).

Bounds: shells go on a connection of their own to the server (`APART`), opened at
the first and closed with the last. sshd bounds the sessions of one connection
(MaxSessions, 10 by default) and the calls, the `serve` process and the commands may
take 9 of them on the other one; a shell lasts hours. For the same reason a shell
holds a turn of the calls' bounds (`Sessions.session`) only while it connects and
starts, never for its life, which would hold the checks and live reads. How many
are open on a server is the web's rule (CP_SHELL_SESSIONS_PER_SERVER); one over
sshd's limit fails at its start.

A session's end (the client's `close`, the connection lost, the control plane
gone) ends the SSH session: the agent there takes it as a hang-up and ends what
the session started."""

import asyncio
import contextlib
import logging
import shlex

from control_plane.agent_link import NotConnected
from protocol.errors import AgentErrorCode
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.ssh")

APART = "shells"  # the name of the shells' connection (Sessions.connection)
TERM = "xterm-256color"
CHUNK = 64 * 1024
END_OF_INPUT = b"\x04"  # on a terminal, what ends the input: its ^D


class Shells:
    def __init__(self, sessions):
        self.sessions = sessions
        self.open_ = {}  # server id -> shells open or starting on its connection apart

    def open(self, target, opening, on_frame):
        """(From another thread.) The session started there, its pipe; NotConnected
        at once when it cannot be."""
        sessions = self.sessions
        process = sessions.run(self._start(target, opening),
                               sessions.connect_timeout + sessions.call_timeout + 5)
        pipe = SshShell(self, target.server_id, opening, process, on_frame)
        sessions.submit(pipe.run())
        return pipe

    def command(self, target, opening):
        args = ["shell", opening.environment_id]
        if opening.odoo:
            args.append("--odoo")
        if not opening.tty:
            args.append("--no-tty")
        if opening.command:
            args += ["--", *opening.command]
        return self.sessions.command(target, " ".join(shlex.quote(a) for a in args))

    async def _start(self, target, opening):
        import asyncssh

        server_id, sessions = target.server_id, self.sessions
        self.open_[server_id] = self.open_.get(server_id, 0) + 1
        terminal = ({"term_type": TERM, "term_size": (opening.cols or 80, opening.rows or 24),
                     "term_modes": _raw_modes()} if opening.tty else {})
        try:
            async with asyncio.timeout(sessions.connect_timeout + sessions.call_timeout):
                async with sessions.session(server_id):
                    conn = await sessions.connection(target, apart=APART)
                    return await conn.create_process(self.command(target, opening),
                                                     encoding=None, **terminal)
        except BaseException as exc:
            self.ended(server_id)
            if isinstance(exc, TimeoutError):
                raise NotConnected("the shell did not start in time") from None
            if isinstance(exc, (OSError, asyncssh.Error)):
                raise NotConnected(f"no SSH session for the shell: {exc}") from None
            raise

    def ended(self, server_id):
        """(On the loop.) A shell ended: its connection closes with the last."""
        left = self.open_.get(server_id, 1) - 1
        if left > 0:
            self.open_[server_id] = left
            return
        self.open_.pop(server_id, None)
        self.sessions.forget(server_id, apart=APART)


class SshShell:
    """One session: its process there and the caller's `on_frame`. `send` is called
    from any thread."""

    def __init__(self, shells, server_id, opening, process, on_frame):
        self.shells, self.server_id = shells, server_id
        self.id, self.tty = opening.session_id, opening.tty
        self.process, self.on_frame = process, on_frame
        self.loop = shells.sessions.loop
        self.done = False  # ended, or hung up: nothing more goes to `on_frame`

    def send(self, frame):
        self.loop.call_soon_threadsafe(self._send, frame)

    def _send(self, frame):
        if self.done:
            return
        process = self.process
        try:
            if frame.close:
                self.done = True
                with contextlib.suppress(OSError):  # sshd sends it on as SIGTERM
                    process.terminate()
                process.close()  # and the session's end, should the signal not be heeded
                return
            if frame.rows and frame.cols and self.tty:
                process.change_terminal_size(frame.cols, frame.rows)
            if frame.data:
                process.stdin.write(frame.data)
            if frame.eof:
                if self.tty:  # a terminal's input ends at ^D, not at the channel's EOF
                    process.stdin.write(END_OF_INPUT)
                else:
                    process.stdin.write_eof()
        except OSError as exc:  # the session is ending: its end says so
            log.debug("shell %s: %s", self.id, exc)

    def _deliver(self, **fields):
        if self.done:
            return
        try:
            self.on_frame(pb.ShellFrame(session_id=self.id, **fields))
        except Exception:  # noqa: BLE001 - the caller's failure ends its session only
            log.exception("shell %s: its frame could not be handed over", self.id)
            self.done = True

    async def _copy(self, stream, stderr):
        while data := await stream.read(CHUNK):
            self._deliver(data=data, stderr=stderr)

    async def run(self):
        import asyncssh

        process = self.process
        try:
            self._deliver(opened=True)
            # With a terminal sshd gives one stream: the error output is in it.
            copies = [self._copy(process.stdout, False)]
            if not self.tty:
                copies.append(self._copy(process.stderr, True))
            for outcome in await asyncio.gather(*copies, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome
            await process.wait_closed()
            if process.exit_status is None:
                raise ConnectionError("the SSH session ended without an exit status")
            self._deliver(exited=True, exit_code=process.exit_status)
        except (OSError, asyncssh.Error) as exc:
            self._deliver(error_code=AgentErrorCode.UNAVAILABLE,
                          error_message=f"the SSH connection to the server was lost: {exc}")
        except Exception:  # noqa: BLE001 - the caller must hear of the end whatever it was
            log.exception("shell %s on server %s", self.id, self.server_id)
            self._deliver(error_code=AgentErrorCode.UNAVAILABLE,
                          error_message="the shell session failed")
        finally:
            self.done = True
            process.close()
            self.shells.ended(self.server_id)


def _raw_modes():
    """The terminal's modes from its start: raw (as cfmakeraw sets them). The
    container's terminal is the one that echoes, edits lines and sends signals;
    this one passes bytes, also those sent before the agent there sets it raw."""
    import asyncssh

    off = ("ICRNL", "INLCR", "IGNCR", "IXON", "ISTRIP", "PARMRK", "OPOST", "ECHO", "ECHONL",
           "ICANON", "ISIG", "IEXTEN")
    return {**{getattr(asyncssh, f"PTY_{name}"): 0 for name in off}, asyncssh.PTY_CS8: 1}
