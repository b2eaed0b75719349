"""What an upgrade (agent/upgrade.py) leaves behind while its new version starts:
the marker (DATA/upgrade.json), its commit by the new version once a gateway
welcomes it, and the guard, a process of the old version that moves back at the
deadline. Imported by the daemon at start (it may be the new version), so it
imports nothing heavy."""

import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from agent import __version__
from agent.config import write_private

MARKER, LOCK, LOG = "upgrade.json", "upgrade.lock", "upgrade.log"
# The marker's phase: the new version on trial, or the guard moving back.
TRIAL, ROLLING_BACK = "trial", "rolling_back"
DRAIN_SECONDS = 3600  # commands running when an upgrade comes get this long to finish


class UpgradeError(Exception):
    pass


def layout():
    """(PREFIX, PREFIX/current) of this installation."""
    prefix = Path(sys.prefix).parent
    current = prefix / "current"
    if not current.is_symlink():
        raise UpgradeError(f"{current} is not a link (an agent installed before upgrades "
                           "existed, or by hand): run the installer again on the server")
    return prefix, current


def switch(data_dir, command_id, current, venv, version, connect_timeout):
    """Step 3 after the drain: marker, link, guard; returns the argv to exec."""
    import subprocess

    argv = [str(current / "bin" / "berth-agent"), *sys.argv[1:]]
    marker = {"command_id": command_id, "from_version": __version__, "to_version": version,
              "from": os.readlink(current), "to": venv.name, "phase": TRIAL,
              "deadline": time.time() + connect_timeout, "connect_timeout": connect_timeout,
              "pid": os.getpid(), "argv": argv, "systemd": bool(os.environ.get("INVOCATION_ID"))}
    write_private(Path(data_dir) / MARKER, json.dumps(marker))
    _point(current, venv.name)
    with open(Path(data_dir) / LOG, "ab") as out:
        subprocess.Popen([sys.executable, "-m", "agent.upgrade_guard", "guard", str(data_dir)],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
    return argv


def _point(link, target):
    """Move a symlink atomically."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


@contextmanager
def _locked(data_dir):
    with open(Path(data_dir) / LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _read(data_dir):
    try:
        return json.loads((Path(data_dir) / MARKER).read_text())
    except (FileNotFoundError, ValueError):
        return None


def pending(data_dir):
    """The marker of an upgrade into this version (we are its new process), if any."""
    marker = _read(data_dir)
    return marker if marker and marker.get("to_version") == __version__ else None


def commit(journal, data_dir, marker):
    """Step 4: the new version is connected. False when the guard is rolling back."""
    with _locked(data_dir):
        now = _read(data_dir)
        if not now or now.get("phase") != TRIAL or now["command_id"] != marker["command_id"]:
            return False
        journal.finish(marker["command_id"], True, {
            "from_version": marker["from_version"], "to_version": marker["to_version"]})
        (Path(data_dir) / MARKER).unlink()
    _prune(marker)
    return True


def _prune(marker):
    """Keep the installer's venv, the one running and the one before it."""
    import shutil

    try:
        prefix, _ = layout()
    except UpgradeError:
        return
    for old in prefix.glob("venv-*"):
        if old.name not in (marker["to"], marker["from"]):
            shutil.rmtree(old, ignore_errors=True)


def guard(data_dir):
    """Step 5 (its own process, the old version's code)."""
    from agent.journal import CommandJournal

    while True:
        with _locked(data_dir):
            marker = _read(data_dir)
            if marker is None or marker.get("phase") != TRIAL:
                return 0  # committed
            if time.time() >= marker["deadline"] or (
                    not marker["systemd"] and not _alive(marker["pid"])):
                marker["phase"] = ROLLING_BACK
                write_private(Path(data_dir) / MARKER, json.dumps(marker))
                break
        time.sleep(0.5)
    prefix = Path(marker["argv"][0]).parents[2]
    _point(prefix / "current", marker["from"])
    CommandJournal(Path(data_dir) / "commands.json").finish(
        marker["command_id"], False, None,
        f"berth-agent {marker['to_version']} did not connect within "
        f"{marker['connect_timeout']} s: rolled back to {marker['from_version']}")
    (Path(data_dir) / MARKER).unlink()
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} rolled back from {marker['to_version']} to "
          f"{marker['from_version']}", flush=True)
    _stop(marker["pid"])
    if not marker["systemd"]:  # else systemd starts it again (Restart=always)
        import subprocess

        with open(Path(data_dir) / "agent.log", "ab") as out:
            subprocess.Popen(marker["argv"], stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
    return 0


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _stop(pid):
    import signal

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if not _alive(pid):
            return


if __name__ == "__main__" and sys.argv[1:2] == ["guard"]:
    sys.exit(guard(sys.argv[2]))
