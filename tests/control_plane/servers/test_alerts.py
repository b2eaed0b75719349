"""Fleet alerts, at the service level where the gateway and the SSH checks hand
them what a server said (the end to end with a real agent and real containers is
tests/e2e/servers/test_fleet_alerts.py): each event once per transition, after its
delay, with hysteresis, and once among several schedulers."""

import pytest

from control_plane.agent_link import Plain
from control_plane.models import Event, Server
from control_plane.services.servers import alerts, monitoring

SETTINGS = {"ALERT_UNREACHABLE_SECONDS": 90, "ALERT_HOLD_SECONDS": 120}


def names(org):
    return [e.name for e in Event.select().where(Event.organization == org.id)
            .order_by(Event.created_at, Event.id)]


def healthy(**figures):
    return {"cpu_percent": 5.0, "memory_percent": 40.0, "disk_percent": 50.0, **figures}


@pytest.fixture
def fleet(world, fake_clock):
    org = world.org()
    server = world.server(org)
    return org, server, fake_clock


def test_the_watch_reports_changes_only_with_hysteresis():
    watch = alerts.Watch()
    assert watch.observe(healthy(), []) == {"disk": False, "memory": False, "loops": []}
    assert watch.observe(healthy(disk_percent=89.9), []) == {}
    assert watch.observe(healthy(disk_percent=90.0), []) == {"disk": True}
    assert watch.observe(healthy(disk_percent=86.0), []) == {}  # not 5 points below yet
    assert watch.observe(healthy(disk_percent=84.9), []) == {"disk": False}
    loop = {"environment_id": "e", "role": "erp", "restart_count": 3, "state": "restarting"}
    assert watch.observe(None, [loop]) == {"loops": [loop]}
    assert watch.observe(None, [{**loop, "restart_count": 4}]) == {}  # the same loop
    assert watch.observe(None, []) == {"loops": []}


def test_a_full_disk_held_two_minutes_alerts_once_per_episode(fleet):
    org, server, clock = fleet
    watch = alerts.Watch()
    alerts.record_changes(server.id, watch.observe(healthy(disk_percent=93.0), []))
    assert alerts.sweep(Plain(SETTINGS)) == 0  # not held long enough
    clock.advance(seconds=119)
    assert alerts.sweep(Plain(SETTINGS)) == 0
    clock.advance(seconds=2)
    assert alerts.sweep(Plain(SETTINGS)) == 1
    assert alerts.sweep(Plain(SETTINGS)) == 0  # a second scheduler, or the next turn: nothing
    assert names(org) == ["server.disk_critical"]
    event = Event.select().where(Event.organization == org.id).get()
    assert event.project_id is None and event.data["server_id"] == str(server.id)
    assert event.data["critical_since"].endswith("Z")

    # Back under 85 %: the episode ends; the next one alerts again.
    alerts.record_changes(server.id, watch.observe(healthy(disk_percent=80.0), []))
    alerts.sweep(Plain(SETTINGS))
    assert not Server.get_by_id(server.id).disk_alerted
    alerts.record_changes(server.id, watch.observe(healthy(disk_percent=95.0), []))
    clock.advance(seconds=121)
    alerts.sweep(Plain(SETTINGS))
    assert names(org) == ["server.disk_critical", "server.disk_critical"]
    # Memory alike, at its own threshold.
    alerts.record_changes(server.id, watch.observe(healthy(disk_percent=95, memory_percent=96),
                                                   []))
    clock.advance(seconds=121)
    alerts.sweep(Plain(SETTINGS))
    assert names(org)[-1] == "server.memory_critical"


def test_an_agent_unheard_of_is_unreachable_once_then_recovered_once(fleet):
    org, server, clock = fleet
    now = clock()
    Server.update(last_seen_at=now, connected_since=None).where(Server.id == server.id).execute()
    clock.advance(seconds=89)
    assert alerts.sweep(Plain(SETTINGS)) == 0
    clock.advance(seconds=2)
    assert alerts.sweep(Plain(SETTINGS)) == 1
    clock.advance(seconds=600)
    assert alerts.sweep(Plain(SETTINGS)) == 0  # still down: one event for the outage
    clock.advance(seconds=1)
    Server.update(last_seen_at=clock(), connected_since=clock()).where(
        Server.id == server.id).execute()
    assert alerts.sweep(Plain(SETTINGS)) == 1
    assert alerts.sweep(Plain(SETTINGS)) == 0
    assert names(org) == ["server.unreachable", "server.recovered"]
    # A server never reached says nothing.
    quiet = Server.create(organization=org, name="new", provider="p", cpu_cores=1, ram_mb=1,
                          disk_gb=1)
    clock.advance(seconds=3600)
    alerts.sweep(Plain(SETTINGS))
    assert all(e.data["server_id"] != str(quiet.id)
               for e in Event.select().where(Event.organization == org.id))


def test_an_ssh_server_failing_its_checks_is_unreachable(fleet, world):
    org, _, clock = fleet
    server = Server.create(organization=org, name="ssh", provider="p", cpu_cores=1, ram_mb=1,
                           disk_gb=1, connection="ssh", last_seen_at=clock(),
                           ssh_checked_at=clock(), unreachable_since=clock())
    clock.advance(seconds=91)
    assert alerts.sweep(Plain(SETTINGS)) == 1
    clock.advance(seconds=30)
    Server.update(unreachable_since=None, ssh_checked_at=clock()).where(
        Server.id == server.id).execute()
    assert alerts.sweep(Plain(SETTINGS)) == 1
    assert names(org) == ["server.unreachable", "server.recovered"]
    assert {e.data["connection"] for e in Event.select()} == {"ssh"}


def test_a_crash_loop_alerts_once_per_episode(fleet, world):
    org, server, clock = fleet
    project = world.project(org, server)
    env, other = world.environment(project), world.environment(project)
    loop = {"environment_id": str(env.id), "role": "erp", "restart_count": 4,
            "state": "restarting"}
    alerts.record_changes(server.id, {"loops": [loop]})
    alerts.record_changes(server.id, {"loops": [loop]})  # said again (a new session)
    assert names(org) == ["environment.crash_loop"]
    event = Event.select().where(Event.name == "environment.crash_loop").get()
    assert event.project_id == project.id
    assert {k: event.data[k] for k in ("environment_id", "role", "restart_count")} == {
        "environment_id": str(env.id), "role": "erp", "restart_count": 4}
    alerts.record_changes(server.id, {"loops": []})
    alerts.record_changes(server.id, {"loops": [loop]})
    assert names(org) == ["environment.crash_loop"] * 2
    # Another server cannot speak for this one's environments, nor an unknown id.
    stranger = world.server(org)
    alerts.record_changes(stranger.id, {"loops": [{**loop, "environment_id": str(other.id)},
                                                  {**loop, "environment_id": "not-a-uuid"}]})
    assert names(org) == ["environment.crash_loop"] * 2


def test_a_certificate_that_starts_failing_alerts_once(fleet, world):
    org, server, clock = fleet
    env = world.environment(world.project(org, server))
    name = f"{env.id.hex[:12]}.apps.example.com"

    def report(state):
        monitoring.record_proxy(server.id, {"running": True, "certificates": {
            name: {"state": state, "reason": "rate limited" if state == "failing" else None}}})
    report("pending")
    report("failing")
    report("failing")
    assert names(org) == ["certificate.failing"]
    event = Event.select().where(Event.name == "certificate.failing").get()
    assert (event.data["hostname"], event.data["environment_id"], event.data["reason"]) == (
        name, str(env.id), "rate limited")
    report("valid")
    report("failing")
    assert names(org) == ["certificate.failing"] * 2


def test_nothing_to_send_writes_nothing(fleet, monkeypatch):
    """A sweep over healthy servers, and a new session saying all is well, open no
    write transaction (SQLite: the write lock)."""
    org, server, clock = fleet
    Server.update(last_seen_at=clock(), connected_since=clock()).where(
        Server.id == server.id).execute()
    opened = []

    class Counting:
        def atomic(self):
            opened.append(1)
            return database.atomic()
    from control_plane.infra.db import database
    monkeypatch.setattr(alerts, "database", Counting())
    alerts.sweep(Plain(SETTINGS))
    alerts.record_changes(server.id, alerts.Watch().observe(healthy(), []))
    assert opened == []
