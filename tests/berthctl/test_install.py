"""`berthctl` installs without the server's dependencies: `pip install berth` (no
extra) from the packages a customer server gets, in a fresh virtualenv, gives a
working `berthctl` and no web framework, ORM or cloud SDK."""

import json
import subprocess
import sys
import tarfile

from control_plane.agent_install import wheelhouse
from tests.berthctl.conftest import clean_env


def test_berthctl_runs_from_the_package_alone(agent_wheelhouse, served, tmp_path):
    wheels = tmp_path / "wheels"
    with tarfile.open(wheelhouse.tar_path(agent_wheelhouse)) as tar:
        tar.extractall(wheels, filter="data")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index",
                    "--find-links", str(wheels), "berth"], check=True, timeout=600,
                   capture_output=True)
    missing = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.util as u; print([m for m in ('flask', "
                              "'peewee', 'boto3', 'marshmallow') if u.find_spec(m)])"],
                             capture_output=True, text=True, check=True)
    assert missing.stdout.strip() == "[]"
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    r = subprocess.run([str(venv / "bin" / "berthctl"), "--output", "json", "projects", "list"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list | dict)
