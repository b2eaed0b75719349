"""The agent's wheelhouse as `berth wheelhouse` builds it (one build per test run),
and wheelhouses of other builds of the agent: this source stamped with another
version, or with a change, its `berth` wheel swapped into the same dependencies."""

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from control_plane import __version__
from control_plane.agent_install import wheelhouse

BERTH = str(Path(sys.executable).with_name("berth"))


@pytest.fixture(scope="session")
def agent_wheelhouse(tmp_path_factory):
    """A directory holding wheelhouse.tar (what CP_WHEELHOUSE_DIR names)."""
    into = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([BERTH, "wheelhouse", "--into", str(into)], check=True,
                   capture_output=True, timeout=900)
    return into


def stamped(base, into, version, change=None):
    """A wheelhouse directory `into` like `base` (a wheelhouse directory) whose
    `berth` is this source with `version` and, when given, `change(source_dir)`
    applied. Returns `into`."""
    into.mkdir(parents=True, exist_ok=True)
    source = wheelhouse._copy_source(wheelhouse.SOURCE, into / "src")
    for name in ("pyproject.toml", "agent/__init__.py", "control_plane/__init__.py"):
        path = source / name
        text = path.read_text()
        old = f'version = "{__version__}"' if name == "pyproject.toml" else \
            f'__version__ = "{__version__}"'
        assert old in text, name
        path.write_text(text.replace(old, old.replace(__version__, version), 1))
    if change is not None:
        change(source)
    wheels = into / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(wheels), str(source)],
                   check=True, capture_output=True, timeout=300)
    (built,) = wheels.glob("berth-*.whl")
    return swapped(base, into, built)


def swapped(base, into, wheel):
    """A wheelhouse directory `into` like `base` with `wheel` as its `berth`."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(wheelhouse.tar_path(base)) as old, \
            tarfile.open(wheelhouse.tar_path(into), "w") as new:
        for member in old.getmembers():
            if not member.name.startswith("berth-"):
                new.addfile(member, old.extractfile(member))
        new.add(wheel, arcname=Path(wheel).name)
    return into
