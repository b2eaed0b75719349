"""Panels a page polls (htmx `every Ns`): each URL carries `seen`, the digest of
what the panel shows, and the answer is 204 while nothing changed (htmx keeps what
it has). An aria-live panel is then read out when it changes, not at every poll."""

import hashlib

from flask import render_template, request

from control_plane.console import render


def panel_digest(template, **context):
    """What a polled panel shows (`template` with `context`), as a short digest."""
    shown = render_template(f"console/{template}", seen="", **context)
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


def polled(template, **context):
    """The panel again, or 204 when the page's `seen` is what it would show."""
    seen = panel_digest(template, **context)
    if request.args.get("seen") == seen:
        return "", 204
    return render(template, seen=seen, **context)
