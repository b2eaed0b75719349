"""Containers restarting in a loop: the ERP or database of an environment that its
restart policy keeps starting again. Stateless, so a one-off call over SSH answers
as the daemon's heartbeat does: a container counts when the engine has restarted it
at least MIN_RESTARTS times and it is restarting now or started within RECENT_S
(a container that settled after old restarts has started long ago). Only
containers that may be looping are inspected (restarting, or up for seconds)."""

import datetime as dt
import re

from agent.metrics import engine

ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
MIN_RESTARTS = 3
RECENT_S = 120
_JUST_UP = re.compile(r"^Up (Less than a second|\d+ seconds?|About a minute|[12] minutes?)\b")


def crash_loops(timeout=5, rows=None):
    """[{environment_id, role, restart_count, state}] for the looping containers
    (among `rows`, the engine's list of the environments' containers, if given)."""
    found = []
    for row in engine.labeled_containers(ENV_LABEL, timeout) if rows is None else rows:
        state, status = row.get("State") or "", row.get("Status") or ""
        if state != "restarting" and not _JUST_UP.match(status):
            continue
        info = engine.inspect(row["Id"], timeout)
        restarts = int(info.get("RestartCount") or 0)
        if restarts < MIN_RESTARTS or not (state == "restarting" or _recent(info)):
            continue
        labels = row.get("Labels") or {}
        found.append({"environment_id": labels.get(ENV_LABEL, ""),
                      "role": labels.get(ROLE_LABEL, ""), "restart_count": restarts,
                      "state": state})
    return found


def _recent(info):
    started = ((info.get("State") or {}).get("StartedAt") or "")[:26].rstrip("Z")
    try:
        at = dt.datetime.fromisoformat(started).replace(tzinfo=dt.UTC)
    except ValueError:
        return False
    return (dt.datetime.now(dt.UTC) - at).total_seconds() < RECENT_S
