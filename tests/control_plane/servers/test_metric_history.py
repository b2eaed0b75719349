"""Metric history: heartbeats from a protocol-level agent over real gRPC to the
real gateway, stored, and read back through GET .../metrics/history; the
scheduler's roll-up into hours and its pruning; scope and bad input."""

import datetime as dt
import time

import pytest

from control_plane.agent_link import Plain
from control_plane.gateway.server import Gateway
from control_plane.infra import clock
from control_plane.models.metrics import SERVER_SERIES
from control_plane.services.servers import history
from protocol.v1 import agent_pb2 as pb
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for
from tests.support.protocol_agent import ProtocolAgent, placed_environment

P = "/api/public/v1"


@pytest.fixture
def fleet(world, gateway):
    with placed_environment(world, gateway) as (_, server, _, env, raw, agent):
        yield server, env, raw, agent
    agent.close()


def _beat(cpu, environments=()):
    return pb.AgentMessage(heartbeat=pb.Heartbeat(
        sent_at_unix_ms=int(time.time() * 1000),
        metrics=pb.HostMetrics(cpu_percent=cpu, memory_percent=40.0, disk_percent=50.0,
                               network_rx_bytes_per_second=1000.0),
        environments=list(environments)))


def _env_stats(env_id, erp_cpu, erp_memory):
    return pb.EnvironmentStats(  # the database's figures not taken: -1
        environment_id=str(env_id), erp_cpu_percent=erp_cpu, erp_memory_used_bytes=erp_memory,
        postgres_cpu_percent=-1, postgres_memory_used_bytes=-1)


def _history(client, raw, path, **query):
    r = client.get(f"{P}/{path}/metrics/history", headers=auth(raw), query_string=query)
    assert r.status_code == 200, r.json
    return r.json


def _whole_hour(client, raw, path):
    """One point over the last hour (the minutes not yet rolled up)."""
    now = dt.datetime.now(dt.UTC)
    return _history(client, raw, path, step="1h",
                    **{"from": (now - dt.timedelta(minutes=50)).isoformat(),
                       "to": (now + dt.timedelta(minutes=5)).isoformat()})


def test_heartbeats_become_server_and_environment_history(client, world, fleet, gateway):
    server, env, raw, agent = fleet
    agent.send(pb.AgentMessage(disk=pb.DiskReport(environments=[pb.EnvironmentDisk(
        environment_id=str(env.id), database_bytes=5_000_000, filestore_bytes=7_000,
        measured_at_unix_ms=int(time.time() * 1000), filestore_files=12,
        attachments_missing=3, files_orphaned=0)])))
    other = world.environment(world.project(world.org(), world.server(world.org())),
                              "running")  # not on this agent's server
    minute = history.minute_now()
    agent.send(_beat(10.0, [_env_stats(env.id, 50.0, 100_000_000),
                            _env_stats(other.id, 99.0, 1)]))

    def recorded():
        points = _whole_hour(client, raw, f"servers/{server.id}")["points"]
        return points and points[0]["cpu_percent"]["avg"] is not None and points
    wait_for(recorded, interval=0.5, what="the heartbeat in the server's history")
    # The minute's sample is written: its later heartbeats are not counted.
    agent.send(_beat(30.0, [_env_stats(env.id, 70.0, 300_000_000)]))
    one_minute = history.minute_now() == minute  # else the second beat began a minute
    session = gateway.sessions[str(server.id)]
    wait_for(lambda: session.host_beat[1]["cpu_percent"] == 30.0, timeout=5,
             what="the second heartbeat handled")
    time.sleep(1.5)  # not a wait: the history is written every second; one more write passes
    points = _whole_hour(client, raw, f"servers/{server.id}")["points"]
    assert len(points) == 1
    cpu = points[0]["cpu_percent"]
    assert cpu == ({"avg": 10.0, "min": 10.0, "max": 10.0} if one_minute else
                   {"avg": 20.0, "min": 10.0, "max": 30.0})
    assert points[0]["memory_percent"]["avg"] == 40.0
    assert points[0]["network_tx_bytes_per_second"]["avg"] == 0.0

    body = _whole_hour(client, raw, f"environments/{env.id}")
    assert body["environment_id"] == str(env.id) and body["step"] == "1h"
    (point,) = body["points"]
    assert point["erp_cpu_percent"]["avg"] == (50.0 if one_minute else 60.0)
    assert point["erp_memory_used_bytes"]["avg"] == (100_000_000 if one_minute
                                                      else 200_000_000)
    assert point["postgres_cpu_percent"] == {"avg": None, "min": None, "max": None}
    assert point["database_bytes"]["avg"] == 5_000_000
    assert point["addons_bytes"]["avg"] is None
    # What the measurement counted, beside the sizes.
    assert [point[s]["avg"] for s in ("filestore_files", "attachments_missing",
                                      "files_orphaned")] == [12, 3, 0]

    # The default step over the default 24 hours: 5 minutes.
    assert _history(client, raw, f"servers/{server.id}")["step"] == "5m"
    # An agent speaks for its own server: nothing kept for another's environment.
    owner_raw, _ = world.key(other.project.organization, "read_only")
    assert _whole_hour(client, owner_raw, f"environments/{other.id}")["points"] == []


def test_a_stream_ended_before_the_write_still_gives_its_minute(client, world, app):
    """A gateway that writes its history only when it stops; the agent ends its
    stream (a reconnect to another gateway, say) before that: its sample is kept."""
    gw = Gateway(history_every=3600)
    port = gw.start_in_thread("127.0.0.1:0")
    try:
        org = world.org()
        server, credential = registered_server(org)
        raw, _ = world.key(org, "read_only")
        agent = ProtocolAgent(port, credential)
        wait_for(lambda: gw.sessions, what="the stream")
        agent.send(_beat(42.0))
        agent.send(None)  # the stream's end, after the heartbeat
        wait_for(lambda: not gw.sessions, what="the stream released")
        agent.close()
    finally:
        gw.stop_from_thread()
    (point,) = _whole_hour(client, raw, f"servers/{server.id}")["points"]
    assert point["cpu_percent"] == {"avg": 42.0, "min": 42.0, "max": 42.0}


def test_history_is_scoped_like_live_metrics(client, world, fleet):
    server, env, raw, _ = fleet
    stranger, _ = world.key(world.org(), "read_only")
    for path in (f"servers/{server.id}", f"environments/{env.id}"):
        r = client.get(f"{P}/{path}/metrics/history", headers=auth(stranger))
        assert r.status_code == 404 and r.json["error"] == "not_found", r.json


@pytest.mark.parametrize("query, field", [
    ({"step": "2m"}, "step"),
    ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
    ({"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
    ({"from": "yesterday"}, "from"),
    ({"step": "1m", "from": "2020-01-01T00:00:00Z", "to": "2020-01-01T12:00:00Z"}, "step"),
    ({"step": "1d", "to": "0001-01-01T00:00:00Z"}, "to"),  # no day before it (was a 500)
])
def test_bad_ranges_and_steps_are_refused(client, world, fleet, query, field):
    server, _, raw, _ = fleet
    r = client.get(f"{P}/servers/{server.id}/metrics/history", headers=auth(raw),
                   query_string=query)
    assert r.status_code == 422, r.json
    assert r.json["error"] == "validation_error" and field in r.json["details"]["query"]


def _row(server, minute, samples, **averages):
    """A server's minute as a gateway writes it."""
    return ("server", server.id.hex, server.id.hex, minute, samples,
            [averages.get(name) for name in SERVER_SERIES])


def test_hours_are_rolled_up_and_old_points_pruned(client, world, app):
    org = world.org()
    server = world.server(org)
    raw, _ = world.key(org, "read_only")
    settings = app.extensions["berth"].settings
    base = dt.datetime(2026, 11, 20, 10, 0)  # a whole hour
    start = history.unix(base)
    rows = [_row(server, start + 60 * m, 4, cpu_percent=float(m), memory_percent=50.0)
            for m in range(60)]
    rows.append(_row(server, start + 3600, 4, cpu_percent=90.0))  # the next hour's first
    history.write(rows)
    now = {"t": base + dt.timedelta(hours=1, minutes=5)}
    clock.set_source(lambda: now["t"])
    try:
        history.sweep(Plain(settings))
        span = {"from": (base - dt.timedelta(hours=1)).isoformat() + "Z",
                "to": (base + dt.timedelta(hours=2)).isoformat() + "Z"}
        points = _history(client, raw, f"servers/{server.id}", step="1h", **span)["points"]
        assert [p["at"] for p in points] == ["2026-11-20T10:00:00.000Z",
                                             "2026-11-20T11:00:00.000Z"]
        assert points[0]["cpu_percent"] == {"avg": 29.5, "min": 0.0, "max": 59.0}
        assert points[1]["cpu_percent"] == {"avg": 90.0, "min": 90.0, "max": 90.0}
        assert points[1]["memory_percent"]["avg"] is None

        # Two days on, the minutes are gone and the hour stays.
        now["t"] = base + dt.timedelta(hours=50)
        history.sweep(Plain(settings))
        assert len(_history(client, raw, f"servers/{server.id}", step="1h",
                            **span)["points"]) == 2  # 11:00 rolled up before it went
        span_6h = dict(span, step="6h")
        (point,) = _history(client, raw, f"servers/{server.id}", **span_6h)["points"]
        assert point["cpu_percent"]["max"] == 90.0 and point["cpu_percent"]["min"] == 0.0

        now["t"] = base + dt.timedelta(days=91)
        history.sweep(Plain(settings))
        assert _history(client, raw, f"servers/{server.id}", step="1d",
                        **{"from": (base - dt.timedelta(days=1)).isoformat() + "Z",
                           "to": (base + dt.timedelta(days=2)).isoformat() + "Z"}
                        )["points"] == []
    finally:
        clock.set_source(None)


def test_a_minute_written_twice_is_merged(client, world):
    org = world.org()
    server = world.server(org)
    raw, _ = world.key(org, "read_only")
    minute = (int(time.time()) // 60 - 2) * 60
    history.write([_row(server, minute, 3, cpu_percent=10.0)])
    history.write([_row(server, minute, 1, cpu_percent=50.0, disk_percent=5.0)])
    at = dt.datetime.fromtimestamp(minute, dt.UTC)
    (point,) = _history(client, raw, f"servers/{server.id}", step="1m",
                        **{"from": at.isoformat(),
                           "to": (at + dt.timedelta(minutes=1)).isoformat()})["points"]
    assert point["cpu_percent"]["avg"] == 20.0  # (3 x 10 + 1 x 50) / 4
    assert point["disk_percent"]["avg"] == 5.0  # only the second write had it
    # Twice in one write (two streams of one server for a moment): the first counts.
    later = minute + 60
    history.write([_row(server, later, 1, cpu_percent=1.0), _row(server, later, 1,
                                                                   cpu_percent=9.0)])
    at = dt.datetime.fromtimestamp(later, dt.UTC)
    (point,) = _history(client, raw, f"servers/{server.id}", step="1m",
                        **{"from": at.isoformat(),
                           "to": (at + dt.timedelta(minutes=1)).isoformat()})["points"]
    assert point["cpu_percent"]["avg"] == 1.0


def test_a_figure_that_is_no_number_is_kept_as_not_taken(client, world):
    """NaN or an infinity from an agent is stored as null on both databases (SQLite
    binds NaN as NULL; PostgreSQL's rows go as COPY text)."""
    org = world.org()
    server = world.server(org)
    raw, _ = world.key(org, "read_only")
    minute = (int(time.time()) // 60 - 2) * 60
    history.write([_row(server, minute, 1, cpu_percent=float("nan"),
                        memory_percent=float("inf"), disk_percent=7.5)])
    at = dt.datetime.fromtimestamp(minute, dt.UTC)
    (point,) = _history(client, raw, f"servers/{server.id}", step="1m",
                        **{"from": at.isoformat(),
                           "to": (at + dt.timedelta(minutes=1)).isoformat()})["points"]
    assert point["cpu_percent"]["avg"] is None and point["memory_percent"]["avg"] is None
    assert point["disk_percent"]["avg"] == 7.5


def test_a_figure_too_large_to_store_loses_only_itself(client, world):
    """A figure past what the database's column holds (PostgreSQL's REAL: about
    3.4e38; an agent may send any double) is stored as not taken; the other
    figures of its row and the other servers' rows of the same write are kept."""
    org = world.org()
    server, other = world.server(org), world.server(org)
    raw, _ = world.key(org, "read_only")
    minute = (int(time.time()) // 60 - 2) * 60
    history.write([_row(server, minute, 1, cpu_percent=1e300, memory_percent=-1e39,
                        disk_percent=7.5, network_rx_bytes_per_second=3e38),
                   _row(other, minute, 1, cpu_percent=12.5)])
    at = dt.datetime.fromtimestamp(minute, dt.UTC)
    window = {"from": at.isoformat(), "to": (at + dt.timedelta(minutes=1)).isoformat()}
    (point,) = _history(client, raw, f"servers/{server.id}", step="1m", **window)["points"]
    assert point["cpu_percent"]["avg"] is None and point["memory_percent"]["avg"] is None
    assert point["disk_percent"]["avg"] == 7.5
    assert point["network_rx_bytes_per_second"]["avg"] == pytest.approx(3e38, rel=1e-6)
    (point,) = _history(client, raw, f"servers/{other.id}", step="1m", **window)["points"]
    assert point["cpu_percent"]["avg"] == 12.5
