"""What a new server downloads: the installer script and the agent's packages.

The agent installs from a wheelhouse the control plane serves, so a server
needs no access to PyPI. `berth wheelhouse` builds it from the source tree."""

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from flask import Blueprint, Response, current_app, send_file

from control_plane.errors import ApiError

SCRIPT = Path(__file__).resolve().parents[1] / "install" / "install.sh"
SOURCE = Path(__file__).resolve().parents[1]

blp = Blueprint("installer", __name__)


def wheelhouse_path(config):
    return Path(config["DATA_DIR"]) / "wheelhouse.tar"


@blp.get("/install.sh")
def install_script():
    text = SCRIPT.read_text().replace("__BERTH_CONTROL_PLANE__",
                                      current_app.config["PUBLIC_URL"].rstrip("/"))
    return Response(text, mimetype="text/x-shellscript")


@blp.get("/agent/wheelhouse.tar")
def wheelhouse():
    path = wheelhouse_path(current_app.config)
    if not path.exists():
        raise ApiError("The agent packages are not built yet: run `berth wheelhouse`.",
                       status=503, code="wheelhouse_missing")
    return send_file(path, mimetype="application/x-tar")


def build_wheelhouse(config, source=SOURCE):
    """The agent's distribution and its dependencies as wheels, in one tar."""
    if not (Path(source) / "pyproject.toml").exists():
        raise ApiError(f"no Berth source tree at {source}")
    target = wheelhouse_path(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation",
                        "--wheel-dir", tmp, str(source)], check=True)
        partial = target.with_suffix(".tar.partial")
        with tarfile.open(partial, "w") as tar:
            for wheel in sorted(Path(tmp).glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
        partial.replace(target)
    return target
