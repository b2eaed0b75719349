"""Agent upgrades at the service level, where the scheduler's `agent-upgrades` job
and `berth admin agents upgrade` call them: who is upgraded and why not, the
rollout's concurrency, the command's payload, and how the agent's answer settles
it. (Real agents upgrading and rolling back: tests/e2e/servers/test_agent_upgrade.py.)"""

import datetime as dt
import hashlib

import pytest

from control_plane import __version__
from control_plane.agent_link import Plain
from control_plane.infra import clock
from control_plane.models import AgentCommand, AgentUpgrade, Server
from control_plane.services.servers import upgrades
from control_plane.services.tasks import engine
from control_plane.vocabulary.errors import NotFound

OLD = "0.2.0.dev1"


@pytest.fixture
def settings(app, tmp_path):
    s = app.extensions["berth"].settings
    s.update(WHEELHOUSE_DIR=str(tmp_path), PUBLIC_URL="https://cp.example.com/",
             AGENT_UPGRADE_CONCURRENCY=2, AGENT_UPGRADE_TIMEOUT=120, AGENT_AUTO_UPGRADE=False)
    (tmp_path / "wheelhouse.tar").write_bytes(b"the agent's packages")
    return s


def agent_server(world, org, version=OLD, connected=True, **fields):
    server = world.server(org)
    now = clock.now()
    Server.update(agent_version=version, connected_since=now if connected else None,
                  last_seen_at=now if connected else None, **fields).where(
        Server.id == server.id).execute()
    return Server.get_by_id(server.id)


def status(server):
    return AgentUpgrade.get(AgentUpgrade.server == server.id).status


def test_who_is_upgraded_and_why_not(world, settings):
    org = world.org()
    behind = agent_server(world, org)
    kinds = {
        "reinstall_needed": agent_server(world, org, "0.1.0"),
        "current": agent_server(world, org, __version__),
        "never_connected": agent_server(world, org, None, connected=False),
        "unknown_version": agent_server(world, org, "not a version"),
        "ssh": agent_server(world, org, OLD, connection="ssh", ssh_host="203.0.113.9"),
    }
    asked = upgrades.request()
    assert asked["version"] == __version__ and asked["queued"] == [str(behind.id)]
    assert sorted((s["reason"], s["server_id"]) for s in asked["skipped"]) == sorted(
        (reason, str(server.id)) for reason, server in kinds.items())
    again = upgrades.request([behind.id])
    assert again["queued"] == [] and again["skipped"] == [
        {"server_id": str(behind.id), "reason": "in_progress"}]
    with pytest.raises(NotFound):
        upgrades.request([behind.id, "8d5f6c1e-0000-4000-8000-000000000000"])
    assert AgentUpgrade.select().count() == 1  # the refused request changed nothing


class Woken:
    """A gateway that records whom it was asked to wake."""

    def __init__(self, woken):
        self.wake = woken.append


def test_at_most_the_concurrency_is_in_flight_and_answers_settle(world, settings):
    org = world.org()
    servers = [agent_server(world, org) for _ in range(3)]
    upgrades.request([s.id for s in servers])
    woken = []
    sent = upgrades.roll_out(Plain(settings, Woken(woken)))
    assert sent == [str(s.id) for s in servers[:2]] and status(servers[2]) == "queued"
    assert sorted(map(str, woken)) == sorted(sent)  # the gateway is told after commit

    first = AgentUpgrade.get(AgentUpgrade.server == servers[0].id)
    command = AgentCommand.get_by_id(first.command)
    assert command.kind == "upgrade" and command.payload == {
        "version": __version__, "url": "https://cp.example.com/agent/wheelhouse.tar",
        "sha256": hashlib.sha256(b"the agent's packages").hexdigest(), "connect_timeout": 120}
    assert upgrades.roll_out(Plain(settings)) == []  # no free slot

    engine.record_result(servers[0].id, command.id, True,
                         {"from_version": OLD, "to_version": __version__})
    assert upgrades.roll_out(Plain(settings)) == [str(servers[2].id)]
    assert status(servers[0]) == "succeeded"

    second = AgentUpgrade.get(AgentUpgrade.server == servers[1].id)
    engine.record_result(servers[1].id, second.command, False, None,
                         f"berth-agent {__version__} did not connect within 120 s: rolled back")
    upgrades.roll_out(Plain(settings))
    second = AgentUpgrade.get_by_id(second.id)
    assert second.status == "failed" and "rolled back" in second.error
    assert second.finished_at is not None


def test_an_upgrade_waits_for_its_agent_and_for_a_wheelhouse(world, settings, tmp_path):
    org = world.org()
    away = agent_server(world, org, connected=False)
    Server.update(agent_version=OLD).where(Server.id == away.id).execute()
    upgrades.request([away.id])
    assert upgrades.roll_out(Plain(settings)) == [] and status(away) == "queued"

    here = agent_server(world, org)
    upgrades.request([here.id])
    (tmp_path / "wheelhouse.tar").unlink()  # still being built
    assert upgrades.roll_out(Plain(settings)) == [] and status(here) == "queued"
    (tmp_path / "wheelhouse.tar").write_bytes(b"built")
    assert upgrades.roll_out(Plain(settings)) == [str(here.id)]


def test_a_sent_upgrade_never_answered_fails(world, settings):
    server = agent_server(world, world.org())
    upgrades.request([server.id])
    upgrades.roll_out(Plain(settings))
    long_ago = clock.now() - upgrades.GIVE_UP - dt.timedelta(seconds=121)
    AgentUpgrade.update(sent_at=long_ago).execute()
    upgrades.roll_out(Plain(settings))
    row = AgentUpgrade.get(AgentUpgrade.server == server.id)
    assert (row.status, row.error) == ("failed", "no answer from the agent")


def test_automatic_upgrades_try_each_version_once(world, settings):
    org = world.org()
    behind = agent_server(world, org)
    agent_server(world, org, __version__)
    assert upgrades.roll_out(Plain(settings)) == []  # off by default
    settings["AGENT_AUTO_UPGRADE"] = True
    assert upgrades.roll_out(Plain(settings)) == [str(behind.id)]
    row = AgentUpgrade.get(AgentUpgrade.server == behind.id)
    engine.record_result(behind.id, row.command, False, None, "rolled back")
    upgrades.roll_out(Plain(settings))
    upgrades.roll_out(Plain(settings))
    assert [r.status for r in AgentUpgrade.select()] == ["failed"]  # not tried again


def test_the_listing_shows_who_lags(world, settings):
    org = world.org()
    behind = agent_server(world, org)
    current = agent_server(world, org, __version__)
    upgrades.request([behind.id])
    rows = {r["id"]: r for r in upgrades.listing()["servers"]}
    assert rows[str(behind.id)]["agent_behind"] is True
    assert rows[str(behind.id)]["upgrade"]["status"] == "queued"
    assert rows[str(current.id)]["agent_behind"] is False and rows[str(current.id)][
        "upgrade"] is None
