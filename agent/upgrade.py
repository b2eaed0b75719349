"""The `upgrade` command: install the control plane's version beside this one,
restart into it, and come back by itself if the new version does not connect.

Layout (control_plane/agent_install/install.sh): PREFIX/venv is the installer's, each upgrade
makes PREFIX/venv-VERSION, and PREFIX/current points at the one that runs (the
service runs PREFIX/current/bin/berth-agent).

1. Download the control plane's wheelhouse, check its sha256, and install
   `berth==VERSION` into a fresh PREFIX/venv-VERSION; the new `berth-agent
   --version` must say VERSION. Any failure so far changes nothing.
2. Take no new command, and wait for those running to finish.
3. Write the marker (DATA/upgrade.json), point `current` at the new venv, start
   the guard, and exec the new version (the same pid: systemd sees no exit).
4. The new version, once a gateway welcomes it, records the command succeeded and
   removes the marker (`commit`).
5. The guard is a process of the old version: if the marker is still there at the
   deadline (or, without systemd, the new process died), it points `current`
   back, records the command failed, stops the new process and starts the old
   version (under systemd, `Restart=always` starts it).

The command's id is the key across all of this: the control plane sends it again
on the new stream, and whichever version runs answers it from the journal."""

import sys
from pathlib import Path

from agent import __version__, upgrade_guard
from agent.commands import handles
from agent.upgrade_guard import UpgradeError, layout
from protocol.kinds import CommandKind

STEP_TIMEOUT = 600  # a download, a venv or a pip install


@handles(CommandKind.UPGRADE)
def upgrade(agent, payload, log):
    version = payload["version"]
    if version == __version__:
        return {"from_version": __version__, "to_version": version}
    if not hasattr(agent, "restart_into"):
        raise UpgradeError("an agent reached over SSH is reinstalled by the control plane")
    prefix, current = layout()
    venv = prefix / f"venv-{version}"
    if venv.resolve() == current.resolve():
        raise UpgradeError(f"{venv} is the version running")
    log("info", f"installing berth-agent {version} beside {__version__} in {venv}")
    _install(payload, venv, agent.data_dir)
    log("info", f"installed; restarting into {version} (back to {__version__} if it has "
                f"not connected within {payload['connect_timeout']} s)")
    agent.restart_into(lambda command_id: upgrade_guard.switch(
        agent.data_dir, command_id, current, venv, version, payload["connect_timeout"]))
    # restart_into returns only when it did not restart (the new venv stays for a retry)
    raise UpgradeError(f"not restarted: other commands were still running after "
                       f"{upgrade_guard.DRAIN_SECONDS} s, or the agent is stopping")


def _install(payload, venv, data_dir):
    import shutil
    import subprocess
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory(prefix="upgrade-", dir=data_dir) as work:
        tar = Path(work, "wheelhouse.tar")
        _download(payload["url"], tar, payload["sha256"])
        with tarfile.open(tar) as archive:
            archive.extractall(Path(work, "wheels"), filter="data")
        shutil.rmtree(venv, ignore_errors=True)  # a failed earlier try of this version
        python = getattr(sys, "_base_executable", None) or "python3"
        for step in ([python, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                      "--no-index", "--find-links", str(Path(work, "wheels")),
                      f"berth=={payload['version']}"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=STEP_TIMEOUT)
            if done.returncode:
                shutil.rmtree(venv, ignore_errors=True)
                raise UpgradeError(f"{' '.join(step[:3])} failed: "
                                   f"{(done.stderr or done.stdout).strip()[-400:]}")
    said = subprocess.run([str(venv / "bin" / "berth-agent"), "--version"],
                          capture_output=True, text=True, timeout=60)
    if said.returncode or payload["version"] not in said.stdout:
        shutil.rmtree(venv, ignore_errors=True)
        raise UpgradeError(f"the new berth-agent does not start: "
                           f"{(said.stderr or said.stdout).strip()[-400:]}")


def _download(url, into, sha256):
    import hashlib
    import urllib.request

    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(into, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:  # URLError, HTTPError, a timeout, a full disk
        raise UpgradeError(f"downloading {url} failed: {exc}") from None
    if digest.hexdigest() != sha256:
        raise UpgradeError("the downloaded wheelhouse does not match its sha256")


