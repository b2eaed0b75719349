"""Agents as the control plane sees them: who a credential belongs to, and
whether the server is connected."""

import datetime as dt

from packaging.version import InvalidVersion, Version

from control_plane import __version__
from control_plane.infra import clock, security
from control_plane.models import Server
from control_plane.vocabulary.states import Connection

# An agent heartbeats every HEARTBEAT_SECONDS; three missed beats and the
# server counts as disconnected even if its gateway died without saying so.
HEARTBEAT_SECONDS = 15
STALE_AFTER = dt.timedelta(seconds=3 * HEARTBEAT_SECONDS)


def server_for_credential(credential):
    if not credential or not credential.startswith("agt_live_") or len(credential) > 128:
        return None
    return Server.get_or_none(Server.agent_credential_hash == security.digest(credential),
                              Server.deleted_at.is_null())


def mark_connected(server_id, facts):
    """Returns the connection's start, which only this session may clear."""
    now = clock.now()
    fields = {"connected_since": now, "last_seen_at": now}
    if facts.agent_version:
        fields["agent_version"] = facts.agent_version[:32]
    if facts.hostname:
        fields["hostname"] = facts.hostname[:255]
    Server.update(**fields).where(Server.id == server_id).execute()
    return now


def mark_seen(server_ids):
    """One statement for a batch of heartbeats (thousands of agents beat every 15 s)."""
    if server_ids:
        Server.update(last_seen_at=clock.now()).where(Server.id.in_(list(server_ids))).execute()


def mark_disconnected(server_id, since):
    # Only the session that connected at `since` may clear it (a newer one may exist).
    Server.update(connected_since=None).where(Server.id == server_id,
                                              Server.connected_since == since).execute()


def is_connected(server):
    """Whether a command for the server can go now: its agent's stream is held, or
    (a server reached over SSH) its last check answered."""
    if server.connection == Connection.SSH:
        return ssh_reachable(server.ssh_checked_at, server.unreachable_since,
                             server.ssh_offered_host_key)
    return connected(server.connected_since, server.last_seen_at)


def ssh_reachable(checked_at, unreachable_since, offered_host_key):
    """Checked at least once, answering, and no changed host key waiting."""
    return checked_at is not None and unreachable_since is None and not offered_host_key


def connected(connected_since, last_seen_at):
    """A stream is held and a heartbeat came within the last 45 s."""
    return (connected_since is not None and last_seen_at is not None
            and clock.now() - last_seen_at < STALE_AFTER)


def env_agent_behind(env):
    """Whether the environment's server runs an agent older than the control plane
    (False when unknown or without a server)."""
    return bool(env.server_id) and bool(behind(env.server.agent_version))


def behind(agent_version):
    """Whether an agent's version is older than the control plane's (None: unknown)."""
    if not agent_version:
        return None
    try:
        return Version(agent_version) < Version(__version__)
    except InvalidVersion:
        return None
