"""Commands run inside a container with their standard streams carried over the
engine's socket a bounded chunk at a time: a database dump comes out of
pg_dump, and goes into pg_restore, without ever being whole in memory or on
the server's disk."""

import select
import socket
import threading
import time

from agent.errors import AgentError, engine_errors
from protocol.errors import AgentErrorCode

CHUNK = 1 << 20  # the most read from the engine at once
IDLE_TIMEOUT = 1800  # seconds without a byte either way: the command or the engine is stuck
SEND_WAIT = 1.0  # seconds a write may wait before asking the engine if the command runs
OUTPUT_POLL = 0.05  # seconds between looks at whether a stalled command's output ended
STDERR_KEEP = 2000  # the tail of a command's error output kept for its failure message


def demultiplexed(read, exact, chunk=CHUNK):
    """(stream, bytes) pieces of the engine's multiplexed stream (an exec without a
    terminal): an 8-byte header (1 stdout, 2 stderr; big-endian size) before each
    frame. `read(n)` gives at most n bytes, `exact(n)` n or fewer at the end."""
    while True:
        header = exact(8)
        if header is None or len(header) < 8:
            return
        kind, left = header[0], int.from_bytes(header[4:8], "big")
        while left:
            data = read(min(left, chunk))
            if not data:
                return
            left -= len(data)
            yield kind, data


class ExecFailed(AgentError):
    code = AgentErrorCode.EXEC_FAILED


class Exec:
    """One command in a running container; `output()` yields its standard
    output, `feed(chunks)` writes its standard input; `check()` its exit code."""

    def __init__(self, api, container_id, cmd, stdin=False, what=None, environment=None):
        self.api, self.what = api, what or cmd[0]
        self.stderr = b""
        self.output_ended = threading.Event()  # set by feed's reader at the output's end
        with engine_errors():
            self.id = api.exec_create(container_id, cmd, stdin=stdin, stdout=True,
                                      stderr=True, environment=environment)["Id"]
            self.sock = api.exec_start(self.id, socket=True)
        raw = getattr(self.sock, "_sock", self.sock)
        raw.settimeout(IDLE_TIMEOUT)
        self.raw = raw
        # Read through the HTTP response's buffer: the first frames may already be in it.
        response = getattr(self.sock, "_response", None)
        try:
            self.reader = response.raw._fp.fp
        except AttributeError:
            self.reader = self.sock

    def _read(self, n):
        read1 = getattr(self.reader, "read1", None)
        return read1(n) if read1 else self.reader.read(n)

    def _exact(self, n):
        out = bytearray()
        while len(out) < n:
            data = self._read(n - len(out))
            if not data:
                return None if not out else bytes(out)
            out += data
        return bytes(out)

    def frames(self):
        """Standard output's pieces; the error output's tail is kept for messages."""
        for kind, data in demultiplexed(self._read, self._exact):
            if kind == 2:
                self.stderr = (self.stderr + data)[-STDERR_KEEP:]
            else:
                yield data

    def output(self):
        """Standard output, chunk by chunk; then the exit code is checked."""
        try:
            yield from self.frames()
        except OSError as exc:  # a timeout, or the engine went away
            raise ExecFailed(f"{self.what}: the container engine's stream broke: {exc}") from exc
        finally:
            self.close()
        self.check()

    def _drain(self):
        try:
            for _ in self.frames():
                pass
        except (OSError, ValueError):  # closed under it: the feed failed, and says why
            pass
        finally:
            self.output_ended.set()

    def feed(self, chunks, to_end=True):
        """Write `chunks` to standard input, then close it and wait for the
        command. A command that stops reading early (it has what it needs, or
        it failed) is not an error here: its exit code says which. With `to_end`
        the chunks are still consumed to the end, so that a caller hashing them
        sees all; without, they are closed there."""
        drained = threading.Thread(target=self._drain, name="berth-exec-drain", daemon=True)
        drained.start()
        writable = True
        try:
            for chunk in chunks:
                if writable:
                    try:
                        self._send(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        writable = False
                if not writable and not to_end:
                    break
            if writable:
                try:
                    self.raw.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            drained.join(IDLE_TIMEOUT)
        finally:
            if not to_end and hasattr(chunks, "close"):
                chunks.close()
            self.close()
        self.check()

    def _send(self, chunk):
        """sendall, except that a command which has exited ends it: the engine may
        hold the connection open without reading it (pg_restore --list reads only
        a dump's table of contents), and a plain sendall then waits on it. The
        end of its output says so at once; the engine is asked every SEND_WAIT."""
        view, polls = memoryview(chunk), 0
        while view:
            _, writable, _ = select.select([], [self.raw], [], OUTPUT_POLL)
            if writable:
                view, polls = view[self.raw.send(view):], 0
                continue
            if self.output_ended.is_set():
                raise BrokenPipeError(f"{self.what} has closed its output")
            polls += 1
            if polls * OUTPUT_POLL >= IDLE_TIMEOUT:
                raise TimeoutError(f"{self.what}: no input read for {IDLE_TIMEOUT} s")
            if polls % round(SEND_WAIT / OUTPUT_POLL) == 0:
                with engine_errors():
                    running = self.api.exec_inspect(self.id).get("Running")
                if not running:
                    raise BrokenPipeError(f"{self.what} has exited")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def exit_code(self, wait=30):
        deadline = time.monotonic() + wait
        with engine_errors():
            while True:
                state = self.api.exec_inspect(self.id)
                if not state.get("Running") or time.monotonic() > deadline:
                    return state.get("ExitCode")
                time.sleep(0.1)

    def check(self, ok=(0,)):
        code = self.exit_code()
        if code not in ok:
            detail = self.stderr.decode(errors="replace").strip()
            raise ExecFailed(f"{self.what} failed (exit code {code})"
                             + (f": {detail}" if detail else ""))
        return code


def run(api, container_id, cmd, what=None, environment=None):
    """The standard output of a short command, as text (its size is small)."""
    ex = Exec(api, container_id, cmd, what=what, environment=environment)
    return b"".join(ex.output()).decode(errors="replace")
