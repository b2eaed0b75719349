"""The link to servers reached over SSH (`SshLink`), and `Reach`, what services
hold: SSH servers through this link, the others through the gateway or the
Redis relay."""

import asyncio

from control_plane.agent_link import NotConnected
from control_plane.gateway.ssh.checks import Checks
from control_plane.gateway.ssh.commands import Commands
from control_plane.gateway.ssh.installer import Installer
from control_plane.gateway.ssh.sessions import Sessions
from control_plane.gateway.ssh.shells import Shells
from control_plane.infra import config
from control_plane.services.servers import ssh as servers_ssh
from protocol.v1 import agent_pb2 as pb


class SshLink:
    """The AgentLink of servers reached over SSH, made of one part per concern:
    the connections (`sessions`), the durable commands (`commands`), the agent's
    installs (`installer`), the checks (`checks`) and the shell sessions (`shells`)."""

    def __init__(self, settings):
        self.settings = settings
        self.sessions = Sessions(settings)
        self.commands = Commands(self.sessions, disk_changed=lambda s: self.checks.disk_changed(s))
        self.installer = Installer(self.sessions)
        self.checks = Checks(self.sessions, self.commands, self.installer)
        self.shells = Shells(self.sessions)

    # --- AgentLink ----------------------------------------------------------------------

    def call(self, server_id, request, timeout):
        """A live request over SSH. NotConnected when the server cannot be reached
        (or its key changed), TimeoutError after `timeout` seconds."""
        target = servers_ssh.target(server_id)
        if target is None:
            raise NotConnected(str(server_id))
        timeout = min(timeout, self.sessions.call_timeout)

        async def ask():
            async with asyncio.timeout(timeout):
                out = await self.sessions.invoke(target, "live", request.SerializeToString())
            return pb.LiveReply.FromString(out)
        return self.sessions.run(ask(), timeout + 5)

    def shell(self, server_id, opening, on_frame):
        """A shell session: `berth-agent shell` there on an SSH session of its own
        (shells.py), started before this returns. NotConnected when the server
        cannot be reached (or its key changed)."""
        target = servers_ssh.target(server_id)
        if target is None:
            raise NotConnected(str(server_id))
        return self.shells.open(target, opening, on_frame)

    def wake(self, server_id):
        """Commands are queued for the server: send them now (in the background)."""
        self.sessions.submit(self.commands.deliver(str(server_id)))

    # --- checks and installs -----------------------------------------------------------------

    def check_all(self, claim_for=None):
        """Every SSH server at once: reachable or not, its facts, and the commands due
        to it. Runs on this link's loop and returns at once (a hung server must not
        hold the scheduler's other jobs): the Future of {server id: error or None},
        or the running sweep's while one runs. The scheduler's job passes its
        interval as `claim_for`: then only the servers it claims are checked."""
        checks = self.checks
        if checks.sweep is None or checks.sweep.done():
            checks.sweep = self.sessions.submit(checks.all(claim_for))
        return checks.sweep

    def install_resident(self, server_id):
        """Turn an SSH server into one with a resident agent (Installer.resident), in
        the background: the Future of its end. A failure is recorded on the server
        (`ssh.error`); NotConnected when it cannot be reached now."""
        target = servers_ssh.target(server_id)
        if target is None:
            raise NotConnected(str(server_id))
        future = self.sessions.submit(self.installer.resident(
            target, config.grpc_public_address(self.settings),
            bool(self.settings["GRPC_TLS_CERT"])))

        def record_failure(done):
            if done.exception() is not None:
                servers_ssh.record_check(server_id, error="installing the resident agent "
                                                          f"failed: {done.exception()}")
        future.add_done_callback(record_failure)
        return future

    def close(self):
        self.sessions.close()


class Reach:
    """The AgentLink services hold: SSH servers over SSH, the others through the
    gateway (or the Redis relay) when there is one."""

    def __init__(self, link, ssh):
        self.link, self.ssh = link, ssh

    def _for(self, server_id):
        link = self.ssh if servers_ssh.is_ssh(server_id) else self.link
        if link is None:
            raise NotConnected(str(server_id))
        return link

    def call(self, server_id, request, timeout):
        return self._for(server_id).call(server_id, request, timeout)

    def shell(self, server_id, opening, on_frame):
        return self._for(server_id).shell(server_id, opening, on_frame)

    def wake(self, server_id):
        try:
            self._for(server_id).wake(server_id)
        except NotConnected:
            pass  # no gateway in this process: its poll delivers
