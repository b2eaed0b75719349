"""The agent installed on a server reached over SSH, from this control plane's
wheelhouse (no download there: the server may not reach the control plane, nor
PyPI): the wheelhouse and the installer sent over the SSH connection into a
private directory, then the installer run with `--wheelhouse FILE --no-register`
(no registration, no service: the control plane calls `berth-agent` itself).
The same install, again, brings an agent older than the control plane up to date."""

import asyncio
import shlex
from importlib import resources
from pathlib import Path

from control_plane.agent_link import NotConnected

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


async def install(link, target):
    """Send and run; NotConnected with the installer's last words when it fails."""
    tar = wheelhouse(link.settings)
    async with link.session(target.server_id):
        conn = await link.connection(target)
        work = shlex.quote(WORK)
        steps = (
            (f"umask 077 && rm -rf {work} && mkdir -p {work} && cat > {work}/wheelhouse.tar",
             {"stdin": str(tar)}),
            (f"cat > {work}/install.sh", {"input": installer(link.settings).encode()}),
            (as_root(target.username, f"sh {work}/install.sh --wheelhouse {work}/wheelhouse.tar "
                                      "--no-register") + f" < /dev/null; s=$?; rm -rf {work}; "
             "exit $s", {}),
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
