"""A shell session's own WebSocket to the control plane (ShellOpen.stream_url): its
ShellFrames, serialized, one to a binary message, both ways.

Why beside the agent's gRPC stream: gRPC's Python library spends ~0.6-0.9 ms of CPU
on each side for every message at a person's typing pace (its threads' wake-ups),
which bounded a keystroke's round trip once many sessions typed at once. The stream
still opens the session and hangs it up; when this socket cannot open (the control
plane refused it: another of its web processes holds the session) the frames stay
on the stream.

The WebSocket is the library's protocol without its I/O (`websockets.client.
ClientProtocol`), on a plain socket: the thread that reads the socket hands each frame
to the session itself, and the session's output thread writes, so a keystroke wakes
one thread each way (the library's threaded client wakes two for a message in, and
costs twice the CPU a keystroke)."""

import logging
import socket
import ssl
import threading

from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.agent")

OPEN_TIMEOUT = 5.0  # seconds for the connection and its handshake
MAX_MESSAGE = 2 * 1024 * 1024  # a frame from the control plane (its clients send at most 1 MiB)
READ = 64 * 1024
# The library's logger for these sockets, never at debug: it would write the
# handshake's headers, the ticket among them.
_library_log = logging.getLogger("berth.agent.shell_socket")
_library_log.setLevel(logging.INFO)


class SessionSocket:
    def __init__(self, sock, protocol, events):
        self.sock, self.protocol = sock, protocol
        self.events = events  # what came with the handshake's answer
        self.lock = threading.Lock()  # the protocol's state, and the socket's writes

    def _flush(self):
        data = b"".join(self.protocol.data_to_send())
        if data:
            self.sock.sendall(data)

    def send(self, frame):
        """Whether the frame went (False: the socket is gone)."""
        try:
            with self.lock:
                self.protocol.send_binary(frame.SerializeToString())
                self._flush()
            return True
        except Exception:  # closed, reset: the reader below ends the session
            return False

    def frames(self):
        """The control plane's frames until the socket closes."""
        from websockets.frames import Opcode
        from websockets.protocol import State

        parts, events, data = [], self.events, b"-"
        while True:
            for event in events:  # a message's frames: BINARY, then CONT until `fin`
                if event.opcode is Opcode.BINARY or (parts and event.opcode is Opcode.CONT):
                    parts.append(event.data)
                    if event.fin:
                        message, parts = b"".join(parts), []
                        try:
                            frame = pb.ShellFrame.FromString(message)
                        except Exception:  # not a frame: this socket is not the session's
                            return
                        yield frame
            if not data or self.protocol.close_expected() or self.protocol.state is State.CLOSED:
                return
            try:
                data = self.sock.recv(READ)
            except OSError:
                data = b""
            with self.lock:
                if data:
                    self.protocol.receive_data(data)
                else:
                    self.protocol.receive_eof()
                events = self.protocol.events_received()
                try:
                    self._flush()  # pongs, and the answer to a close
                except OSError:
                    pass

    def close(self):
        try:
            with self.lock:
                self.protocol.send_close()
                self._flush()
        except Exception:
            pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def dial(url, ticket):
    """The session's socket, or None when it does not open (the stream carries it)."""
    try:
        return _open(url, ticket)
    except Exception as exc:
        log.info("shell session on the agent's stream (its own socket did not open: %s)",
                 type(exc).__name__)
        return None


def _open(url, ticket):
    from websockets.client import ClientProtocol
    from websockets.http11 import Response
    from websockets.uri import parse_uri

    uri = parse_uri(url)
    protocol = ClientProtocol(uri, max_size=MAX_MESSAGE, logger=_library_log)
    sock = socket.create_connection((uri.host, uri.port), timeout=OPEN_TIMEOUT)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # keystrokes go at once
        if uri.secure:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=uri.host)
        request = protocol.connect()
        request.headers["Authorization"] = f"Bearer {ticket}"
        request.headers["User-Agent"] = "berth-agent"
        protocol.send_request(request)
        sock.sendall(b"".join(protocol.data_to_send()))
        while True:
            data = sock.recv(READ)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            if protocol.handshake_exc is not None:
                raise protocol.handshake_exc
            events = protocol.events_received()
            answered = [i for i, event in enumerate(events) if isinstance(event, Response)]
            if answered:
                break
            if not data:
                raise ConnectionError("closed during the handshake")
        sock.settimeout(None)
        return SessionSocket(sock, protocol, events[answered[0] + 1:])
    except BaseException:
        sock.close()
        raise
