"""The console's first page: what needs attention, the projects with their
environments' status, the servers with their figures, the latest activity
(services/overview.py)."""

from control_plane.console import actor, berth, blp, render
from control_plane.console.panels import panel_digest, polled
from control_plane.services import overview as svc


@blp.get("/")
def home():
    found = svc.overview(actor(), berth().settings["APPS_DOMAIN"])
    return render("overview.html", seen=panel_digest("_attention.html",
                                                     attention=found["attention"]), **found)


@blp.get("/attention")
def attention_panel():
    """The attention list alone: the overview polls it."""
    return polled("_attention.html",
                  attention=svc.attention(actor(), berth().settings["APPS_DOMAIN"]))
