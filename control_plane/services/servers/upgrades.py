"""Resident agents' upgrades to the version the control plane carries (the `berth`
in its wheelhouse, which is its own version).

An upgrade is a row (`AgentUpgrade`): queued when an operator asks
(`berth admin agents upgrade`) or, with CP_AGENT_AUTO_UPGRADE, when an agent older
than the control plane connects; sent as one `upgrade` command when a rollout slot
is free (at most CP_AGENT_UPGRADE_CONCURRENCY in flight) and the agent is
connected. The agent installs the new version beside the old one, restarts into
it and, if it has not connected within CP_AGENT_UPGRADE_TIMEOUT seconds, rolls
back by itself (agent/upgrade.py); the command's result settles the row.

Servers reached over SSH need none of this: their agent is reinstalled at the
next check when its version differs (gateway/ssh/checks.py). Agents from before
this release have no `upgrade` command: they are told to run the installer again."""

import datetime as dt
import hashlib
import os

from packaging.version import InvalidVersion, Version
from peewee import fn

from control_plane import __version__
from control_plane.agent_install import wheelhouse
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import AgentCommand, AgentUpgrade, Server
from control_plane.services import agents
from control_plane.services.tasks import engine, queue
from control_plane.vocabulary.errors import NotFound
from control_plane.vocabulary.states import CommandStatus, Connection, UpgradeStatus, check
from protocol.kinds import CommandKind

U = UpgradeStatus
FIRST_UPGRADABLE = Version("0.2.0.dev0")  # the first agents with an `upgrade` command
# A sent upgrade the agent never answered (it went away mid-install): failed after
# its connect timeout and this much more (a slow server's pip install included).
GIVE_UP = dt.timedelta(minutes=30)
IN_FLIGHT = (U.QUEUED, U.SENT)
REINSTALL = "it predates agents that upgrade themselves: run the installer again on the server"


def request(server_ids=None):
    """Queue an upgrade for each server given (None: every server), skipping those
    that need none or cannot take one, each with its reason."""
    query = Server.select().where(Server.deleted_at.is_null())
    if server_ids is not None:
        query = query.where(Server.id.in_(list(server_ids)))
    servers = list(query.order_by(Server.created_at))
    if server_ids is not None and len(servers) < len(set(server_ids)):
        raise NotFound("No server has that id.")
    queued, skipped = [], []
    with database.atomic():
        busy = _in_flight({s.id for s in servers})
        for server in servers:
            reason = "in_progress" if server.id in busy else _why_not(server)
            if reason:
                skipped.append({"server_id": str(server.id), "reason": reason})
            else:
                _queue(server)
                queued.append(str(server.id))
    return {"version": __version__, "queued": queued, "skipped": skipped}


def _why_not(server):
    if server.connection == Connection.SSH:
        return "ssh"  # reinstalled at its next check when its version differs
    if not server.agent_version:
        return "never_connected"
    try:
        version = Version(server.agent_version)
    except InvalidVersion:
        return "unknown_version"
    if version >= Version(__version__):
        return "current"
    if version < FIRST_UPGRADABLE:
        return "reinstall_needed"
    return None


def _in_flight(server_ids):
    rows = (AgentUpgrade.select(AgentUpgrade.server)
            .where(AgentUpgrade.server.in_(list(server_ids)),
                   AgentUpgrade.status.in_(IN_FLIGHT)).tuples())
    return {server_id for (server_id,) in rows}


def _queue(server):
    return AgentUpgrade.create(server=server.id, to_version=__version__,
                               from_version=server.agent_version,
                               status=check("upgrade", None, U.QUEUED))


def roll_out(berth):
    """One turn of the scheduler's `agent-upgrades` job: settle what agents
    answered, queue automatic upgrades, and send queued ones into free slots."""
    settle(berth.settings)
    if berth.settings["AGENT_AUTO_UPGRADE"]:
        _queue_behind()
    return dispatch(berth)


def settle(settings):
    """Sent upgrades whose command has a result, or that never got one."""
    now = clock.now()
    give_up = now - GIVE_UP - dt.timedelta(seconds=settings["AGENT_UPGRADE_TIMEOUT"])
    # Read whole before writing: SQLite refuses a write from a connection whose read
    # (a cursor still open) saw an older snapshot.
    rows = list(AgentUpgrade.select(AgentUpgrade, AgentCommand.status.alias("command_status"),
                                    AgentCommand.result.alias("command_result"))
                .join(AgentCommand, on=(AgentCommand.id == AgentUpgrade.command))
                .where(AgentUpgrade.status == U.SENT).objects())
    for row in rows:
        if row.command_status == CommandStatus.SUCCEEDED:
            _finish(row, U.SUCCEEDED, None, now)
        elif row.command_status in (CommandStatus.FAILED, CommandStatus.WITHDRAWN):
            error = (row.command_result or {}).get("error")
            _finish(row, U.FAILED, error or "the agent could not upgrade", now)
        elif row.sent_at < give_up:
            _finish(row, U.FAILED, "no answer from the agent", now)


def _finish(row, status, error, now):
    (AgentUpgrade.update(status=check("upgrade", row.status, status), finished_at=now,
                         error=error[:500] if error else None)
     .where(AgentUpgrade.id == row.id, AgentUpgrade.status == row.status).execute())


def _queue_behind():
    """Automatic upgrades: each agent server behind, once per version (a version
    that failed or rolled back there is not tried again by itself)."""
    tried = AgentUpgrade.select(AgentUpgrade.server).where(
        AgentUpgrade.to_version == __version__)
    candidates = Server.select().where(
        Server.deleted_at.is_null(), Server.connection == Connection.AGENT,
        Server.agent_version.is_null(False), Server.agent_version != __version__,
        Server.id.not_in(tried))
    with database.atomic():
        for server in candidates:
            if _why_not(server) is None:
                _queue(server)


def dispatch(berth):
    """Send queued upgrades to connected agents while fewer than the concurrency
    are in flight. Returns the ids sent."""
    limit = berth.settings["AGENT_UPGRADE_CONCURRENCY"]
    free = limit - AgentUpgrade.select().where(AgentUpgrade.status == U.SENT).count()
    if free <= 0:
        return []
    digest = _wheelhouse_digest(berth.settings)
    if digest is None:
        return []  # no wheelhouse yet (it is being built): the next turn sends them
    waiting = list(AgentUpgrade.select(AgentUpgrade, Server)  # read whole, as in `settle`
                   .join(Server, on=(Server.id == AgentUpgrade.server))
                   .where(AgentUpgrade.status == U.QUEUED).order_by(AgentUpgrade.created_at))
    sent = []
    for row in waiting:
        if len(sent) >= free:
            break
        if agents.is_connected(row.server) and _send(row, berth, digest, limit):
            sent.append(str(row.server_id))
    return sent


def _send(row, berth, digest, limit):
    """Claim the row, in one conditional UPDATE (one scheduler sends it, and only
    while a slot is free), and queue its command, in one transaction."""
    sent = AgentUpgrade.alias()
    in_flight = sent.select(fn.COUNT(sent.id)).where(sent.status == U.SENT)
    with database.atomic():
        claimed = (AgentUpgrade.update(status=check("upgrade", U.QUEUED, U.SENT),
                                       sent_at=clock.now())
                   .where(AgentUpgrade.id == row.id, AgentUpgrade.status == U.QUEUED,
                          in_flight < limit).execute())
        if not claimed:
            return False
        command = queue.enqueue(row.server_id, CommandKind.UPGRADE, {
            "version": row.to_version, "sha256": digest,
            "url": berth.settings["PUBLIC_URL"].rstrip("/") + "/agent/wheelhouse.tar",
            "connect_timeout": berth.settings["AGENT_UPGRADE_TIMEOUT"]})
        AgentUpgrade.update(command=command.id).where(AgentUpgrade.id == row.id).execute()
        engine.wake(berth, row.server_id)
    return True


_DIGESTS = {}


def _wheelhouse_digest(settings):
    """The sha256 of the wheelhouse tar the agents download (kept while the file is
    unchanged); None when there is none yet."""
    path = wheelhouse.tar_path(wheelhouse.directory(settings))
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        _DIGESTS.clear()
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def listing():
    """Every server's agent: its version, whether it is behind, and its latest upgrade."""
    latest = {}
    for row in AgentUpgrade.select().order_by(AgentUpgrade.created_at):
        latest[row.server_id] = row
    out = []
    for server in Server.select().where(Server.deleted_at.is_null()).order_by(Server.created_at):
        upgrade = latest.get(server.id)
        out.append({
            "id": str(server.id), "name": server.name, "connection": server.connection,
            "agent_version": server.agent_version, "agent_behind": agents.behind(
                server.agent_version), "connected": agents.is_connected(server),
            "upgrade": None if upgrade is None else {
                "status": upgrade.status, "from_version": upgrade.from_version,
                "to_version": upgrade.to_version, "error": upgrade.error,
                "requested_at": upgrade.created_at, "finished_at": upgrade.finished_at}})
    return {"version": __version__, "servers": out}
