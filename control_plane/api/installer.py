"""What a new server downloads, served: the installer script at /install.sh and
the agent's packages at /agent/wheelhouse.tar (control_plane/agent_install/), so a
server needs no access to PyPI."""

from flask import Blueprint, Response, current_app, send_file

from control_plane.agent_install import script
from control_plane.agent_install import wheelhouse as wh

blp = Blueprint("installer", __name__)


@blp.get("/install.sh")
def install_script():
    return Response(script.text(current_app.config["PUBLIC_URL"]),
                    mimetype="text/x-shellscript")


@blp.get("/agent/wheelhouse.tar")
def wheelhouse():
    directory = wh.directory(current_app.config)
    builder = current_app.extensions.get("wheelhouse")
    refusal = (builder.unavailable() if builder is not None
               else wh.unavailable_without_builder(directory))
    if refusal is not None:
        raise refusal
    return send_file(wh.tar_path(directory), mimetype="application/x-tar")
