"""Disk reports on the agent stream, from a protocol-level agent over real gRPC
to the real gateway, read back through GET /environments/{id}/metrics: what
an agent may write, what a partial or late report does, and older agents
(which never send one) leaving the figures null."""

import datetime as dt
import time

import pytest

from control_plane.models import Environment
from protocol.v1 import agent_pb2 as pb
from tests.conftest import auth
from tests.support.agents import wait_for
from tests.support.protocol_agent import placed_environment

P = "/api/public/v1"


@pytest.fixture
def setup(world, gateway):
    with placed_environment(world, gateway) as placed:
        env = placed[3]
        Environment.update(disk_gb=10).where(Environment.id == env.id).execute()
        yield placed


def _disk(client, env, raw):
    r = client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw))
    assert r.status_code == 200, r.json
    return r.json["disk"]


def _report(*items):
    return pb.AgentMessage(disk=pb.DiskReport(environments=[pb.EnvironmentDisk(**i)
                                                             for i in items]))


def _ms(offset_s=0.0):
    return int((time.time() + offset_s) * 1000)


def _measured(env_id, after=None):
    def check():
        at = Environment.get_by_id(env_id).disk_measured_at
        return at is not None and (after is None or at > after) and at
    return wait_for(check, what="disk figures recorded")


def test_agent_without_disk_reports_leaves_figures_null(client, setup):
    _, _, _, env, raw, agent = setup
    agent.send(pb.AgentMessage(heartbeat=pb.Heartbeat(sent_at_unix_ms=_ms())))
    assert _disk(client, env, raw) == {"allocated_gb": 10, "database_bytes": None,
                                       "filestore_bytes": None, "addons_bytes": None,
                                       "measured_at": None}


def test_report_is_stored_for_the_agents_own_environments_only(client, world, setup):
    org, server, project, env, raw, agent = setup
    elsewhere = world.environment(world.project(org, world.server(org)), "running")
    gone = world.environment(project, "running", server=server, active=False)
    agent.send(_report(
        {"environment_id": str(env.id), "database_bytes": 7_000_000, "filestore_bytes": 4096,
         "addons_bytes": 123_456, "measured_at_unix_ms": _ms(-1)},
        {"environment_id": str(elsewhere.id), "database_bytes": 1, "measured_at_unix_ms": _ms()},
        {"environment_id": str(gone.id), "database_bytes": 1, "measured_at_unix_ms": _ms()},
        {"environment_id": "not-a-uuid", "database_bytes": 1}))
    _measured(env.id)
    disk = _disk(client, env, raw)
    assert (disk["database_bytes"], disk["filestore_bytes"], disk["addons_bytes"]) == (
        7_000_000, 4096, 123_456)
    assert disk["measured_at"].endswith("Z")
    for other in (elsewhere, gone):
        row = Environment.get_by_id(other.id)
        assert row.disk_database_bytes is None and row.disk_measured_at is None


def test_partial_report_keeps_earlier_figures_and_a_late_one_changes_nothing(client, setup):
    _, _, _, env, raw, agent = setup
    agent.send(_report({"environment_id": str(env.id), "database_bytes": 8_000_000,
                        "filestore_bytes": 10, "addons_bytes": 20, "measured_at_unix_ms": _ms(-5)}))
    first = _measured(env.id)
    # The database was stopped this time: its figure is not in the report.
    agent.send(_report({"environment_id": str(env.id), "filestore_bytes": 30,
                        "measured_at_unix_ms": _ms(-2)}))
    second = _measured(env.id, after=first)
    # A report older than the stored one (a re-send on a new stream, say) is ignored.
    agent.send(_report({"environment_id": str(env.id), "database_bytes": 1, "filestore_bytes": 1,
                        "addons_bytes": 1, "measured_at_unix_ms": _ms(-60)}))
    # An agent clock ahead of ours is not believed: the time is ours at the latest.
    agent.send(_report({"environment_id": str(env.id), "addons_bytes": 40,
                        "measured_at_unix_ms": _ms(3600)}))
    third = _measured(env.id, after=second)
    disk = _disk(client, env, raw)
    assert (disk["database_bytes"], disk["filestore_bytes"], disk["addons_bytes"]) == (
        8_000_000, 30, 40)
    assert third <= dt.datetime.now(dt.UTC).replace(tzinfo=None)


def test_nonsense_in_a_report_is_not_stored(client, setup):
    """A negative figure is not a size; a time out of range is not a time: the
    figure keeps its stored value, the time is the control plane's."""
    _, _, _, env, raw, agent = setup
    agent.send(_report({"environment_id": str(env.id), "database_bytes": 5_000_000,
                        "measured_at_unix_ms": _ms(-10)}))
    first = _measured(env.id)
    agent.send(_report({"environment_id": str(env.id), "database_bytes": -1,
                        "filestore_bytes": 64, "measured_at_unix_ms": 2**62}))
    _measured(env.id, after=first)
    disk = _disk(client, env, raw)
    assert (disk["database_bytes"], disk["filestore_bytes"]) == (5_000_000, 64)
    # The stream is still up: the agent answered the metrics request above.
