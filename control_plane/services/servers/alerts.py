"""Fleet alerts: the events that tell an organization when one of its servers or
ERPs goes wrong, sent through the outbox like every event (docs/webhooks.md).

- `server.unreachable` once a server has not been heard from for
  CP_ALERT_UNREACHABLE_SECONDS (an agent's heartbeats, an SSH server's checks), and
  `server.recovered` once it is back: one event per transition, never two in a row.
- `server.disk_critical`, `server.memory_critical`: the spec's critical thresholds
  (disk 90 %, memory 95 %) held for CP_ALERT_HOLD_SECONDS. Hysteresis: the figure
  must fall 5 points below the threshold before another episode can alert.
- `environment.crash_loop`: the server says one of the environment's containers is
  being restarted in a loop; once per episode.
- `certificate.failing`: the proxy reports a name's certificate failing; once per
  time it starts failing (monitoring.record_proxy).

Heartbeats reach thousands of gateway sessions every 15 s, so the figures are
followed in memory (`Watch`, one per session or SSH server) and only their changes
are written; the scheduler's `fleet-alerts` job turns what is written into events,
each claimed by a conditional UPDATE (several schedulers send it once)."""

import datetime as dt
import uuid

from control_plane import events
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Environment, Server
from control_plane.services import agents
from control_plane.vocabulary.states import Connection

DISK = ("disk_percent", 90.0, 85.0)  # the figure, critical at, clear below
MEMORY = ("memory_percent", 95.0, 90.0)


class Watch:
    """One server's last word, in the process that hears it: which critical figures
    are past their threshold, and which containers loop. `observe` returns only
    what changed (the first observation: everything)."""

    def __init__(self):
        self.disk = self.memory = None
        self.loops = None

    def observe(self, metrics, loops):
        changes = {}
        if metrics is not None:
            for name, (field, high, low) in (("disk", DISK), ("memory", MEMORY)):
                value, was = metrics.get(field), getattr(self, name)
                now = value >= high if was is not True else value >= low
                if now != was:
                    setattr(self, name, now)
                    changes[name] = now
        looping = frozenset((x["environment_id"], x["role"]) for x in loops)
        if looping != self.loops:
            self.loops = looping
            changes["loops"] = list(loops)
        return changes


def record_changes(server_id, changes):
    """What a Watch saw change: the critical figures' start (or end), and the crash
    loops, each new one an `environment.crash_loop` event now. Read first: a new
    session's first word is usually that all is well, which writes nothing."""
    server = Server.get_or_none(Server.id == server_id)
    if server is None:
        return
    now = clock.now()
    figures = {f"{name}_critical_since": now if changes[name] else None
               for name in ("disk", "memory") if name in changes
               and (getattr(server, f"{name}_critical_since") is None) == changes[name]}
    loops = {loop["environment_id"]: loop for loop in changes.get("loops") or ()}
    envs = list(Environment.select().where(
        Environment.server == server_id, Environment.is_active,
        Environment.crash_loop_since.is_null(False)
        | Environment.id.in_([e for e in loops if _uuid(e)]))) if "loops" in changes else []
    moves = [(env, str(env.id) in loops) for env in envs
             if (env.crash_loop_since is None) == (str(env.id) in loops)]
    if not figures and not moves:
        return
    with database.atomic():
        for field, value in figures.items():
            column = getattr(Server, field)
            Server.update({column: value}).where(
                Server.id == server_id,
                column.is_null() if value else column.is_null(False)).execute()
        for env, looping in moves:
            moved = Environment.update(crash_loop_since=now if looping else None).where(
                Environment.id == env.id, Environment.crash_loop_since.is_null()
                if looping else Environment.crash_loop_since.is_null(False)).execute()
            if moved and looping and server.organization_id is not None:
                events.record_crash_loop(env, server, server.organization_id, loops[str(env.id)])


def _uuid(text):
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _down(server, now, after):
    if server.connection == Connection.SSH:
        return (server.last_seen_at is not None and server.unreachable_since is not None
                and server.unreachable_since <= now - after)
    return (server.last_seen_at is not None and not agents.is_connected(server)
            and server.last_seen_at <= now - after)


def sweep(berth):
    """The scheduler's job: the events that are due. Returns how many went out."""
    now = clock.now()
    after = dt.timedelta(seconds=berth.settings["ALERT_UNREACHABLE_SECONDS"])
    hold = now - dt.timedelta(seconds=berth.settings["ALERT_HOLD_SECONDS"])
    quiet = now - after
    candidates = Server.select().where(
        Server.deleted_at.is_null(), Server.organization.is_null(False),
        Server.down_alerted | (Server.last_seen_at <= quiet)
        | Server.unreachable_since.is_null(False)
        | Server.disk_critical_since.is_null(False) | Server.disk_alerted
        | Server.memory_critical_since.is_null(False) | Server.memory_alerted)
    sent = 0
    for server in candidates:
        due = [step for step in (_reachability(server, now, after), _held(server, "disk", hold),
                                 _held(server, "memory", hold)) if step]
        if due:  # a write only when there is something to send or re-arm
            with database.atomic():
                sent += sum(step() for step in due)
    return sent


def _claim(server, field, value):
    """One conditional UPDATE: whether this caller moved the flag (and sends the event)."""
    column = getattr(Server, field)
    return Server.update({column: value}).where(Server.id == server.id,
                                                column == (not value)).execute() == 1


def _reachability(server, now, after):
    """The step due for the server's reachability (a function), or None."""
    if not server.down_alerted and _down(server, now, after):
        return lambda: _send(server, "down_alerted", True, events.Name.SERVER_UNREACHABLE,
                             last_seen_at=_iso(server.last_seen_at))
    if server.down_alerted and agents.is_connected(server):
        return lambda: _send(server, "down_alerted", False, events.Name.SERVER_RECOVERED,
                             last_seen_at=_iso(server.last_seen_at))
    return None


def _held(server, name, hold):
    since, alerted = getattr(server, f"{name}_critical_since"), getattr(server, f"{name}_alerted")
    flag = f"{name}_alerted"
    if since is not None and since <= hold and not alerted:
        return lambda: _send(server, flag, True,
                             getattr(events.Name, f"SERVER_{name.upper()}_CRITICAL"),
                             critical_since=_iso(since))
    if since is None and alerted:  # the episode ended: the next one alerts again
        return lambda: _claim(server, flag, False) and 0
    return None


def _send(server, flag, value, name, **data):
    if not _claim(server, flag, value):
        return 0  # another scheduler sent it
    events.record_server(server, name, **data)
    return 1


def _iso(moment):
    return moment and moment.isoformat(timespec="milliseconds") + "Z"
