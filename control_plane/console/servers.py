"""Servers (health, connection, agent version, live figures) and the stored
history both charts read (a server's and an environment's)."""

import datetime as dt

from flask import current_app, redirect, request, url_for

from control_plane.api.public.registration_tokens import TokenCreateSchema
from control_plane.api.public.servers import SshServerCreateSchema
from control_plane.console import actor, berth, blp, confirm, form, render
from control_plane.infra import clock
from control_plane.models.metrics import ENVIRONMENT_SERIES, SERVER_SERIES
from control_plane.services import overview
from control_plane.services.deploys import environments as envs
from control_plane.services.servers import history, monitoring, registration, ssh
from control_plane.services.servers import servers as svc
from control_plane.vocabulary.errors import ApiError, NotFound

PAGE = 100
# The charts' ranges, each with a step that gives at most a few hundred points.
RANGES = {"1h": (dt.timedelta(hours=1), "1m"), "24h": (dt.timedelta(hours=24), "5m"),
          "7d": (dt.timedelta(days=7), "1h")}


@blp.get("/servers")
def servers():
    rows, meta = svc.list_servers(actor(), limit=PAGE, cursor=request.args.get("cursor"))
    tokens = [] if actor().read_only else [
        t for t in registration.list_tokens(actor()) if t.status == "pending"]
    return render("servers.html", servers=overview.with_figures(rows), meta=meta,
                  tokens=tokens, expiries=tuple(registration.EXPIRY_CHOICES))


@blp.post("/servers/registration-tokens")
def create_registration_token():
    """A token for adding a server and the line to paste on it: shown on this answer
    only (the token is stored hashed)."""
    body = form(TokenCreateSchema(), ("server_name", "expires_in"))
    token, raw = registration.create_token(actor(), **body)
    return render("server_token.html", 201, token=token, raw=raw,
                  command=registration.install_command(current_app.config["PUBLIC_URL"], raw))


@blp.post("/servers/registration-tokens/<uuid:token_id>/revoke")
def revoke_registration_token(token_id):
    if asked := confirm("revoke token", "Revoke this registration token?"):
        return asked
    registration.revoke_token(actor(), token_id)
    return redirect(url_for("console.servers"), 303)


@blp.post("/servers/ssh")
def add_ssh_server():
    """A server the control plane reaches over SSH: the organization's public key is
    shown, to put in the user's authorized_keys; its host key is pinned as given, or
    at first contact."""
    body = form(SshServerCreateSchema())
    server, public = ssh.create(actor(), **body)
    ssh.wake_check(berth())
    return render("server_ssh_added.html", 201, server=server, public_key=public)


@blp.get("/servers/<uuid:server_id>")
def server(server_id):
    monitoring.own_server(actor(), server_id)  # the organization's own, or 404
    row = svc.one(actor(), server_id)
    row["reachable"] = svc.reachable(row)
    return render("server.html", server=row, pinned=ssh.fingerprint(row["ssh_host_key"]),
                  offered=ssh.fingerprint(row["ssh_offered_host_key"]))


@blp.post("/servers/<uuid:server_id>/accept-host-key")
def accept_host_key(server_id):
    offered = ssh.fingerprint(svc.one(actor(), server_id)["ssh_offered_host_key"])
    if asked := confirm("accept host key", f"Accept the host key {offered}?"):
        return asked
    ssh.accept_host_key(actor(), server_id)
    ssh.wake_check(berth())
    return redirect(url_for("console.server", server_id=server_id, done="accepted"), 303)


@blp.get("/servers/<uuid:server_id>/live")
def server_live(server_id):
    """The agent's figures now (asked live): a panel the page loads after itself."""
    try:
        metrics, problem = monitoring.server_metrics(actor(), server_id, berth()), None
    except ApiError as err:
        if isinstance(err, NotFound):
            raise
        metrics, problem = None, err.message
    return render("_server_live.html", metrics=metrics, problem=problem)


def _series(points, names, start, end):
    """uPlot's columns: the times, then each series' averages (null where none); and
    the range asked, which the x axis spans whatever points are stored."""
    return {"t": [history.unix(p["at"]) for p in points],
            "series": {name: [p[name]["avg"] for p in points] for name in names},
            "start": history.unix(start), "end": history.unix(end)}


def _range():
    span, step = RANGES.get(request.args.get("range"), RANGES["1h"])
    end = clock.now()
    return end - span, end, history.STEPS[step]


@blp.get("/servers/<uuid:server_id>/history.json")
def server_history(server_id):
    start, end, step = _range()
    found = history.server_history(actor(), server_id, start, end, step)
    return _series(found["points"], SERVER_SERIES, start, end)


@blp.get("/environments/<uuid:env_id>/history.json")
def environment_history(env_id):
    """Also its deployments in the range, which the charts mark on the time axis."""
    start, end, step = _range()
    found = history.environment_history(actor(), env_id, start, end, step)
    marks = [{"t": history.unix(at), "label": f"{'rollback' if trigger == 'rollback' else kind}"
                                              f"{f' v{version}' if version else ''}"}
             for at, version, kind, trigger in envs.deployed_between(actor(), env_id, start, end)]
    return {**_series(found["points"], ENVIRONMENT_SERIES, start, end), "deploys": marks}
