"""The agent installed on a server reached over SSH, from this control plane's
wheelhouse (no download there: the server may not reach the control plane, nor
PyPI): the wheelhouse and the installer sent over the SSH connection into a
private directory, then the installer run with `--wheelhouse FILE --no-register`
(no registration, no service: the control plane calls `berth-agent` itself).
The same install, again, brings an agent older than the control plane up to date.

`configure` gives the agent there its configuration with a fresh credential; and
`resident` turns the server into one with a resident agent: configured with the
gateway's address, the installer run with its service (systemd) started, and the
server's `connection` moved to `agent`."""

import asyncio
import json
import logging
import shlex

from control_plane.agent_install import script
from control_plane.agent_install import wheelhouse as wh
from control_plane.agent_link import NotConnected
from control_plane.gateway.ssh.sessions import as_root
from control_plane.services.servers import ssh as servers_ssh

log = logging.getLogger("berth.ssh")
WORK = "/var/tmp/berth-install"  # made mode 0700, removed afterwards


def wheelhouse(settings):
    path = wh.tar_path(wh.directory(settings))
    if not path.is_file():
        raise NotConnected("the agent's wheelhouse is not built yet (`berth wheelhouse`, or "
                           "`berth serve` builds it at start)")
    return path


def installer(settings):
    return script.text(settings["PUBLIC_URL"])


class Installer:
    def __init__(self, sessions):
        self.sessions = sessions
        self.installing = set()  # server ids whose agent is being installed

    def start(self, target):
        """The agent installed there from this control plane's wheelhouse, on a task
        of its own (minutes: the other servers' checks go on meanwhile); a failure
        is recorded on the server."""
        if target.server_id in self.installing:
            return
        self.installing.add(target.server_id)

        async def install():
            try:
                async with asyncio.timeout(self.sessions.settings["SSH_INSTALL_TIMEOUT"]):
                    await self.install(target)
                self.sessions.forget_served(target.server_id)  # the old agent's `serve` ends
                log.info("server %s: the agent is installed", target.server_id)
            except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded
                why = str(exc) or "did not finish in time"
                await asyncio.to_thread(servers_ssh.record_check, target.server_id,
                                        error=f"installing the agent failed: {why}")
            finally:
                self.installing.discard(target.server_id)
        asyncio.ensure_future(install())

    async def configure(self, target, grpc_address=None, grpc_tls=False):
        """The agent's configuration and a fresh credential (on standard input); its
        digest is kept once the server has it."""
        settings, credential = self.sessions.settings, servers_ssh.new_credential()
        conf = {"control_plane": settings["PUBLIC_URL"],
                "grpc_address": grpc_address or settings.get("GRPC_PUBLIC_ADDRESS") or "",
                "grpc_tls": grpc_tls, "server_id": target.server_id, "credential": credential}
        async with asyncio.timeout(self.sessions.call_timeout):
            await self.sessions.invoke(target, "configure", json.dumps(conf).encode())
        await asyncio.to_thread(servers_ssh.keep_credential, target.server_id, credential)

    async def resident(self, target, grpc_address, grpc_tls):
        """A resident agent from now on: configured to dial the gateway, installed
        with its service, and the server reached through the gateway (its commands
        wait in the queue until the agent connects)."""
        await self.configure(target, grpc_address, grpc_tls)
        await self.install(target, register=True)
        await asyncio.to_thread(servers_ssh.switch_to_agent, target.server_id)
        self.sessions.forget(target.server_id)

    async def install(self, target, register=False):
        """Send and run; NotConnected with the installer's last words when it fails.
        `register`: the installer's full run (the configuration already there, it
        keeps it, and starts the agent's service), else `--no-register`."""
        settings, tar = self.sessions.settings, wheelhouse(self.sessions.settings)
        async with self.sessions.session(target.server_id):
            conn = await self.sessions.connection(target)
            work = shlex.quote(WORK)
            steps = (
                (f"umask 077 && rm -rf {work} && mkdir -p {work} && "
                 f"cat > {work}/wheelhouse.tar", {"stdin": str(tar)}),
                (f"cat > {work}/install.sh", {"input": installer(settings).encode()}),
                (as_root(target.username,
                         f"sh {work}/install.sh --wheelhouse {work}/wheelhouse.tar"
                         + ("" if register else " --no-register"))
                 + f" < /dev/null; s=$?; rm -rf {work}; exit $s", {}),
            )
            for command, io in steps:
                try:
                    result = await conn.run(command, check=False, encoding=None, **io)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    raise NotConnected(f"the SSH connection broke: {exc}") from None
                if result.exit_status != 0:
                    said = ((result.stdout or b"") + (result.stderr or b"")).decode(
                        errors="replace").strip()[-300:]
                    raise NotConnected(f"exit {result.exit_status}: {said}")
