"""Metric history end to end: a real `berth-agent run` beside real containers, its
heartbeats' figures through the real gateway into the database, read back through
GET /environments/{id}/metrics/history and /servers/{id}/metrics/history."""

import datetime as dt

from tests.conftest import auth
from tests.support.agents import registered_server, wait_for

P = "/api/public/v1"


def _last_hour(client, raw, path):
    now = dt.datetime.now(dt.UTC)
    r = client.get(f"{P}/{path}/metrics/history", headers=auth(raw), query_string={
        "step": "1h", "from": (now - dt.timedelta(minutes=30)).isoformat(),
        "to": (now + dt.timedelta(minutes=5)).isoformat()})
    assert r.status_code == 200, r.json
    return r.json["points"]


def test_an_agents_heartbeats_fill_the_history(client, world, gateway, agents,
                                               labeled_container):
    org = world.org()
    server, credential = registered_server(org)
    env = world.environment(world.project(org, server), server=server)
    raw, _ = world.key(org, "read_only")
    # An ERP that keeps a core busy, and a database that idles.
    labeled_container(env.id, "erp", ["sh", "-c", "while :; do :; done"])
    labeled_container(env.id, "postgres", ["sleep", "600"])
    # The environments' figures with every heartbeat (by default once a minute).
    agents(server, credential, env={"BERTH_AGENT_SAMPLE_SECONDS": "1"})

    def sampled():  # CPU needs two samples (heartbeats 15 s apart) to be measured
        points = _last_hour(client, raw, f"environments/{env.id}")
        return points and points[-1]["erp_cpu_percent"]["avg"] is not None and points[-1]
    point = wait_for(sampled, timeout=60, interval=1, what="the ERP's CPU in the history")
    assert point["erp_cpu_percent"]["max"] > 20  # a busy loop: most of a core
    assert point["erp_memory_used_bytes"]["avg"] > 0
    assert point["postgres_memory_used_bytes"]["avg"] > 0
    (host,) = _last_hour(client, raw, f"servers/{server.id}")
    assert 0 < host["memory_percent"]["avg"] <= 100 and host["disk_percent"]["avg"] > 0
