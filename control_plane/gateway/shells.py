"""Shell sessions on the streams this gateway holds: the pipe a caller writes to
(`LocalShell`), the agent's frames handed to the caller (`deliver`), and every
session of a stream that ended told so (`lost`). The caller's side (the web
process's socket, services/servers/shells.py) holds the session's rules: who, how
many, how long; here only bytes move, and only the opening and the hang-up when the
agent opens the session's own socket (control_plane/shell_agent_socket.py)."""

from control_plane.infra import handoff
from protocol import wire
from protocol.errors import AgentErrorCode
from protocol.v1 import agent_pb2 as pb

LOST = "the server's agent disconnected"
UNSUPPORTED = "shell_unsupported"  # relayed: the agent's release has no shells


class LocalShell:
    """A session on a stream held here. `send` is called from any thread."""

    def __init__(self, loop, session, session_id, on_frame):
        self.handoff, self.session, self.id = handoff.of(loop), session, session_id
        self.on_frame = on_frame

    def send(self, frame):
        frame.session_id = self.id
        self.handoff.call(self._send, frame)

    def _send(self, frame):
        if frame.close:
            if self.session.shells.pop(self.id, None) is None:
                return  # ended already: the agent has nothing of it
        elif self.id not in self.session.shells:
            return
        self.session.outbox.put_nowait(pb.ControlMessage(shell=frame))


def open_local(gateway, session, opening, on_frame):
    """(From any thread.) The session's pipe; the ShellOpen goes out on the loop."""
    from control_plane.agent_link import ShellUnsupported

    if session.revision < wire.SHELLS:
        raise ShellUnsupported(session.server_id)
    pipe = LocalShell(gateway.loop, session, opening.session_id, on_frame)

    def start():
        if gateway.sessions.get(session.server_id) is not session:  # ended meanwhile
            on_frame(pb.ShellFrame(session_id=pipe.id, error_code=AgentErrorCode.UNAVAILABLE,
                                   error_message=LOST))
            return
        session.shells[pipe.id] = pipe
        session.outbox.put_nowait(pb.ControlMessage(shell_open=opening))
    gateway.loop.call_soon_threadsafe(start)
    return pipe


async def deliver(gateway, session, frame):
    """A frame the agent sent: to its session's caller; its last one ends it here."""
    pipe = session.shells.get(frame.session_id)
    if pipe is None:
        return
    if frame.exited or frame.error_code:
        session.shells.pop(frame.session_id, None)
    pipe.on_frame(frame)


def lost(session):
    """The stream ended: its sessions end with it (the agent hangs them up)."""
    pipes, session.shells = list(session.shells.values()), {}
    for pipe in pipes:
        pipe.on_frame(pb.ShellFrame(session_id=pipe.id, error_code=AgentErrorCode.UNAVAILABLE,
                                    error_message=LOST))
