"""The agent wheelhouse: the `berth` distribution and its dependencies as wheels,
in one tar (in the data dir, or `CP_WHEELHOUSE_DIR`), which new servers install from
(no PyPI needed there).

`berth` itself comes from the source tree of an editable install, or, where the
control plane runs from an installed wheel (a virtualenv, an image), from the
installed distribution repacked as the wheel it was installed from.

`berth wheelhouse` builds it in the foreground; `berth serve` and `berth web` build
it in a background thread at start when it is missing or stale (built from other
agent code, or for another Python), so a fresh control plane serves the
`install_command` without a manual step. One build at a time per data dir (a file
lock); the state is kept for `/agent/wheelhouse.tar` to explain a 503."""

import atexit
import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from packaging.version import Version

from control_plane.vocabulary.errors import (
    WheelhouseBuildFailed,
    WheelhouseBuilding,
    WheelhouseMissing,
)

# Where `pip wheel` builds `berth` from: the checkout of an editable install.
SOURCE = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_SECONDS = 900
RETRY_AFTER_FAILURE_SECONDS = 60
SOURCE_FILES = ("pyproject.toml", "README.md", "agent", "protocol", "control_plane", "berthctl")


class BuildFailed(Exception):
    """The wheelhouse cannot be built; the message says why, for people."""


def directory(settings):
    """Where the wheelhouse is kept: CP_WHEELHOUSE_DIR, else the data directory."""
    return settings["WHEELHOUSE_DIR"] or settings["DATA_DIR"]


def tar_path(data_dir):
    return Path(data_dir) / "wheelhouse.tar"


def start_building(app):
    """`berth serve` / `berth web`: build a missing or stale wheelhouse in the
    background while requests are served (the app's `wheelhouse` extension)."""
    if not app.config["WHEELHOUSE_AUTO_BUILD"]:
        return None
    builder = app.extensions["wheelhouse"] = Background(directory(app.config))
    builder.ensure()
    return builder


def _stamp_path(data_dir):
    return Path(data_dir) / "wheelhouse.json"


def fingerprint(source=SOURCE):
    """What the wheelhouse depends on: the agent's code and the package metadata (the
    source tree's files, or the installed distribution's RECORD of its files' hashes),
    and the Python version and CPU its binary wheels are for."""
    digest = hashlib.sha256(f"{sys.version_info[:2]} {platform.machine()}".encode())
    if not _has_source(source):
        digest.update(_installed().read_text("RECORD").encode())
        return digest.hexdigest()
    files = [source / "pyproject.toml"]
    for code in ("agent", "protocol"):  # what servers run
        files += sorted((source / code).rglob("*"))
    for path in files:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _has_source(source):
    return (source / "pyproject.toml").is_file() and (source / "agent").is_dir()


def _installed():
    """The installed `berth` distribution, when this code is it (not an editable
    install, whose RECORD lists no modules)."""
    try:
        dist = importlib.metadata.distribution("berth")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is None or dist.read_text("RECORD") is None or not any(
            str(f) == "control_plane/agent_install/wheelhouse.py" for f in dist.files or ()):
        raise BuildFailed(f"Berth is neither a source tree at {SOURCE} nor an installed "
                          "distribution to build the agent packages from")
    return dist


# Files pip writes at install time: not part of the wheel it installed.
_INSTALL_ONLY = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _repack_installed(into):
    """The installed `berth` as a wheel again: its files from site-packages, its
    dist-info without what installing added, a new RECORD. Console scripts are left
    out (pip writes them again from entry_points.txt)."""
    dist = _installed()
    wheel_tags = [ln.split(":", 1)[1].strip() for ln in dist.read_text("WHEEL").splitlines()
                  if ln.startswith("Tag:")]
    name = f"berth-{dist.version}-{wheel_tags[0] if wheel_tags else 'py3-none-any'}.whl"
    into.mkdir(parents=True, exist_ok=True)
    record, info_dir = [], None
    with zipfile.ZipFile(into / name, "w", zipfile.ZIP_DEFLATED) as whl:
        for entry in dist.files:
            parts = entry.parts
            if parts[0] == ".." or "__pycache__" in parts:
                continue
            if parts[0].endswith(".dist-info"):
                info_dir = parts[0]
                if parts[-1] in _INSTALL_ONLY:
                    continue
            data = Path(dist.locate_file(entry)).read_bytes()
            whl.writestr(str(entry), data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{entry},sha256={sha},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        whl.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return into / name


def is_current(data_dir, source=SOURCE):
    """The tar exists and was built from this code."""
    if not tar_path(data_dir).is_file():
        return False
    try:
        stamp = json.loads(_stamp_path(data_dir).read_text())
        return stamp.get("fingerprint") == fingerprint(source)
    except (OSError, ValueError, BuildFailed):
        return False


def _build_isolation_args():
    """Build `berth` with the venv's own setuptools when it is new enough for
    pyproject.toml's build-system; otherwise let pip fetch one in isolation."""
    try:
        if Version(importlib.metadata.version("setuptools")) >= Version("77"):
            importlib.metadata.version("wheel")
            return ["--no-build-isolation"]
    except importlib.metadata.PackageNotFoundError:
        pass
    return []


def _pip_reason(stderr):
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:500]


_running = set()  # pip processes of this one, ended when it exits


@atexit.register
def _end_builds():
    for proc in list(_running):
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)  # reaped here: nobody else would


def _run_pip(command):
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise BuildFailed(f"cannot run pip: {exc}") from None
    _running.add(proc)
    try:
        with contextlib.suppress(OSError):  # in the background: after the requests
            os.setpriority(os.PRIO_PROCESS, proc.pid, 10)
        try:
            _, stderr = proc.communicate(timeout=BUILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise BuildFailed(f"pip wheel took longer than {BUILD_TIMEOUT_SECONDS} s") from None
        return proc.returncode, stderr
    finally:
        _running.discard(proc)


def build(data_dir, source=SOURCE):
    """Build the tar into the data dir (atomically replaced). Raises BuildFailed."""
    data_dir = Path(data_dir)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target, print_ = tar_path(data_dir), fingerprint(source)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp) / "wheels"
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                   "--wheel-dir", str(wheels)]
        if _has_source(source):
            command += [*_build_isolation_args(), str(_copy_source(source, Path(tmp) / "src"))]
        else:  # pip copies the wheel over and fetches its dependencies' wheels
            command.append(str(_repack_installed(Path(tmp) / "berth")))
        returncode, stderr = _run_pip(command)
        if returncode != 0:
            raise BuildFailed(f"pip wheel failed: {_pip_reason(stderr)}")
        partial = target.with_suffix(".tar.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for wheel in sorted(wheels.glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
        partial.replace(target)
    stamp = {"fingerprint": print_, "built_at": time.time()}
    fd = os.open(_stamp_path(data_dir), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(stamp, fh)
    return target


def _copy_source(source, copy):
    """Built from a copy: setuptools writes build/ and *.egg-info next to the
    sources, and files left there from older code would end up in the wheel."""
    copy.mkdir()
    for name in SOURCE_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, copy / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif (source / name).is_file():
            shutil.copy2(source / name, copy / name)
    return copy


class _Lock:
    """One build at a time per data dir, across processes (`serve`, `web`s, the CLI)."""

    def __init__(self, data_dir):
        self.path = Path(data_dir) / "wheelhouse.lock"

    def __enter__(self):
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock


def build_locked(data_dir, source=SOURCE, force=False):
    with _Lock(data_dir):
        if not force and is_current(data_dir, source):
            return tar_path(data_dir)
        return build(data_dir, source)


class Background:
    """The state a server process keeps of the wheelhouse (app.extensions)."""

    def __init__(self, data_dir, source=SOURCE):
        self.data_dir, self.source = Path(data_dir), source
        self._lock = threading.Lock()
        self.thread = None
        self.error = None  # why the last build failed
        self.failed_at = 0.0

    def ensure(self, check_stale=True):
        """Start a build unless one runs, the tar is there (and current, with
        `check_stale`), or the last one failed less than a minute ago. Returns at
        once. Staleness is checked at start only: code changed under a running
        server does not take its wheelhouse away mid-install."""
        with self._lock:
            if self.thread is not None and self.thread.is_alive():
                return
            if self.error and time.monotonic() - self.failed_at < RETRY_AFTER_FAILURE_SECONDS:
                return
            if (is_current(self.data_dir, self.source) if check_stale
                    else tar_path(self.data_dir).is_file() and not self.error):
                return
            self.thread = threading.Thread(target=self._run, name="wheelhouse", daemon=True)
            self.thread.start()

    def _run(self):
        print("berth: building the agent wheelhouse in the background", file=sys.stderr,
              flush=True)
        try:
            path = build_locked(self.data_dir, self.source)
        except Exception as exc:  # every failure is shown to whoever asks for the tar
            self.error = str(exc) if isinstance(exc, BuildFailed) else f"{type(exc).__name__}: {exc}"
            self.failed_at = time.monotonic()
            print(f"berth: the agent wheelhouse could not be built: {self.error}",
                  file=sys.stderr, flush=True)
            return
        self.error = None
        print(f"berth: agent wheelhouse ready ({path})", file=sys.stderr, flush=True)

    def unavailable(self):
        """The 503 to answer while the tar cannot be served, or None."""
        self.ensure(check_stale=False)
        building = self.thread is not None and self.thread.is_alive()
        if building:
            return WheelhouseBuilding("The agent packages are being built; try again in a "
                                      "minute.", headers={"Retry-After": "30"})
        if self.error:
            return WheelhouseBuildFailed(
                f"The agent packages could not be built: {self.error}. The control "
                "plane retries within a minute; its operator can run "
                "`berth wheelhouse` to see the error.",
                headers={"Retry-After": str(RETRY_AFTER_FAILURE_SECONDS)})
        if not tar_path(self.data_dir).is_file():
            return _missing()
        return None


def _missing():
    return WheelhouseMissing("The agent packages are not built yet: run `berth wheelhouse`.")


def unavailable_without_builder(data_dir):
    return None if tar_path(data_dir).is_file() else _missing()
