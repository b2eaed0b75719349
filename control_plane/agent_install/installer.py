"""What a new server downloads: the installer script and the agent's packages.

The agent installs from a wheelhouse the control plane serves (control_plane/
wheelhouse.py), so a server needs no access to PyPI. The script is package data:
an installed control plane serves it too."""

from importlib import resources

from flask import Blueprint, Response, current_app, send_file

from control_plane.agent_install import wheelhouse as wh

blp = Blueprint("installer", __name__)


def wheelhouse_dir(config):
    return config["WHEELHOUSE_DIR"] or config["DATA_DIR"]


def wheelhouse_path(config):
    return wh.tar_path(wheelhouse_dir(config))


def start_building(app):
    """`berth serve` / `berth web`: build a missing or stale wheelhouse in the
    background while requests are served."""
    if not app.config["WHEELHOUSE_AUTO_BUILD"]:
        return None
    builder = app.extensions["wheelhouse"] = wh.Background(wheelhouse_dir(app.config))
    builder.ensure()
    return builder


@blp.get("/install.sh")
def install_script():
    text = (resources.files("control_plane.agent_install") / "install.sh").read_text()
    text = text.replace("__BERTH_CONTROL_PLANE__", current_app.config["PUBLIC_URL"].rstrip("/"))
    return Response(text, mimetype="text/x-shellscript")


@blp.get("/agent/wheelhouse.tar")
def wheelhouse():
    builder = current_app.extensions.get("wheelhouse")
    refusal = (builder.unavailable() if builder is not None
               else wh.unavailable_without_builder(wheelhouse_dir(current_app.config)))
    if refusal is not None:
        raise refusal
    return send_file(wheelhouse_path(current_app.config), mimetype="application/x-tar")
