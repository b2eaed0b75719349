"""The installer script (`install.sh`, package data: an installed control plane has
it too), with this control plane's address written in."""

from importlib import resources

PLACEHOLDER = "__BERTH_CONTROL_PLANE__"


def text(public_url):
    """The script a server runs, set to register with `public_url`."""
    script = (resources.files("control_plane.agent_install") / "install.sh").read_text()
    return script.replace(PLACEHOLDER, public_url.rstrip("/"))
