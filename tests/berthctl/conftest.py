"""The real `berthctl` console script, run as a subprocess against the real
`berth serve`; the end-to-end module adds a real agent and real containers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serve import Served

BERTHCTL = str(Path(sys.executable).with_name("berthctl"))
# What a developer's shell may hold must not reach the runs under test.
SCRUBBED = ("BERTH_URL", "BERTH_API_KEY", "BERTH_USER_TOKEN", "BERTH_CONFIG",
            "XDG_CONFIG_HOME", "BERTHCTL_DEBUG")


def clean_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def berthctl(*args, env, input=None, timeout=600):
    return subprocess.run([BERTHCTL, *args], env=env, input=input, capture_output=True,
                          text=True, timeout=timeout)


def no_traceback(result):
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`berth serve` with an organization and its keys (made by `berth admin`)."""
    tmp = tmp_path_factory.mktemp("served")
    s = Served(tmp / "cp").start()
    s.org = s.admin("org", "create", "--name", "cli-org")["id"]
    s.keys = {}
    for kind in ("full_access", "read_only"):
        s.keys[kind] = s.admin("key", "create", "--org", s.org, "--name", kind, "--type", kind,
                               "--scope", "organization")["key"]
    yield s
    s.stop()
