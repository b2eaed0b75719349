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
import shlex
from importlib import resources
from pathlib import Path

from control_plane.agent_link import NotConnected
from control_plane.services.servers import ssh as servers_ssh

WORK = "/var/tmp/berth-install"  # made mode 0700, removed afterwards


def as_root(username, command):
    """`command` as root: directly for root, else through `sudo -n` (passwordless
    sudo is then required; the installer and the agent need root)."""
    return command if username == "root" else f"sudo -n {command}"


def wheelhouse(settings):
    path = Path(settings["WHEELHOUSE_DIR"] or settings["DATA_DIR"]) / "wheelhouse.tar"
    if not path.is_file():
        raise NotConnected("the agent's wheelhouse is not built yet (`berth wheelhouse`, or "
                           "`berth serve` builds it at start)")
    return path


def installer(settings):
    text = (resources.files("control_plane") / "install.sh").read_text()
    return text.replace("__BERTH_CONTROL_PLANE__", settings["PUBLIC_URL"].rstrip("/"))


async def configure(link, target, grpc_address=None, grpc_tls=False):
    """The agent's configuration and a fresh credential (on standard input); its
    digest is kept once the server has it."""
    credential = servers_ssh.new_credential()
    conf = {"control_plane": link.settings["PUBLIC_URL"],
            "grpc_address": grpc_address or link.settings.get("GRPC_PUBLIC_ADDRESS") or "",
            "grpc_tls": grpc_tls, "server_id": target.server_id, "credential": credential}
    async with asyncio.timeout(link.call_timeout):
        await link.invoke(target, "configure", json.dumps(conf).encode())
    await asyncio.to_thread(servers_ssh.keep_credential, target.server_id, credential)


async def resident(link, target, grpc_address, grpc_tls):
    """A resident agent from now on: configured to dial the gateway, installed with
    its service, and the server reached through the gateway (its commands wait in
    the queue until the agent connects)."""
    await configure(link, target, grpc_address, grpc_tls)
    await install(link, target, register=True)
    await asyncio.to_thread(servers_ssh.switch_to_agent, target.server_id)
    link.forget(target.server_id)


async def install(link, target, register=False):
    """Send and run; NotConnected with the installer's last words when it fails.
    `register`: the installer's full run (the configuration already there, it keeps
    it, and starts the agent's service), else `--no-register`."""
    tar = wheelhouse(link.settings)
    async with link.session(target.server_id):
        conn = await link.connection(target)
        work = shlex.quote(WORK)
        steps = (
            (f"umask 077 && rm -rf {work} && mkdir -p {work} && cat > {work}/wheelhouse.tar",
             {"stdin": str(tar)}),
            (f"cat > {work}/install.sh", {"input": installer(link.settings).encode()}),
            (as_root(target.username, f"sh {work}/install.sh --wheelhouse {work}/wheelhouse.tar"
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
