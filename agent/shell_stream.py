"""A shell session's own WebSocket to the control plane (ShellOpen.stream_url): its
ShellFrames, serialized, one to a binary message, both ways.

Why beside the agent's gRPC stream: gRPC's Python library spends ~0.6-0.9 ms of CPU
on each side for every message at a person's typing pace (its threads' wake-ups),
which bounded a keystroke's round trip once many sessions typed at once; a WebSocket
message costs a small part of that. The stream still opens the session and hangs it
up; when this socket cannot open (the control plane refused it: another of its web
processes holds the session) the frames stay on the stream."""

import logging

from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.agent")
# The library's own logger for these sockets, never at debug: it would write the
# handshake's headers, the ticket among them.
_library_log = logging.getLogger("berth.agent.shell_socket")
_library_log.setLevel(logging.INFO)

OPEN_TIMEOUT = 5.0  # seconds for the connection and its handshake
MAX_MESSAGE = 2 * 1024 * 1024  # a frame from the control plane (its clients send at most 1 MiB)


class SessionSocket:
    def __init__(self, ws):
        self.ws = ws

    def send(self, frame):
        """Whether the frame went (False: the socket is gone)."""
        try:
            self.ws.send(frame.SerializeToString())
            return True
        except Exception:  # closed, reset: the reader below ends the session
            return False

    def frames(self):
        """The control plane's frames until the socket closes."""
        try:
            for message in self.ws:
                if isinstance(message, bytes):
                    yield pb.ShellFrame.FromString(message)
        except Exception as exc:  # closed abnormally, or not a frame: the session ends
            log.debug("shell socket ended: %s", exc)

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


def dial(url, ticket):
    """The session's socket, or None when it does not open (the stream carries it)."""
    from websockets.sync.client import connect

    try:
        ws = connect(url, additional_headers={"Authorization": f"Bearer {ticket}"},
                     open_timeout=OPEN_TIMEOUT, compression=None, max_size=MAX_MESSAGE,
                     user_agent_header="berth-agent", logger=_library_log)
    except Exception as exc:
        log.info("shell session on the agent's stream (its own socket did not open: %s)",
                 type(exc).__name__)
        return None
    return SessionSocket(ws)  # (websockets sets TCP_NODELAY: keystrokes go at once)
