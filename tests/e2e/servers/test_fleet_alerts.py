"""Fleet alerts end to end: a real gateway, real `berth-agent run` processes and real
containers; the events are read from the outbox the webhooks are sent from, and the
scheduler's job (alerts.sweep) is run as the scheduler runs it. An agent killed is
`server.unreachable` once, and `server.recovered` once when it returns (and reaches
the e-mail and chat notification channels that follow it); a container
that keeps crashing is `environment.crash_loop`, from the agent's heartbeat; a server
reached over SSH says the same at its checks."""

import json

from control_plane.agent_link import Plain
from control_plane.models import Event, Server
from control_plane.services.servers import alerts
from control_plane.services.webhooks import delivery
from tests.conftest import auth
from tests.support.agents import registered_server
from tests.support.smtp_receiver import smtp_receiver  # noqa: F401 - fixture
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures


def names(org):
    return [e.name for e in Event.select().where(Event.organization == org.id)
            .order_by(Event.created_at, Event.id)]


def test_an_agent_killed_is_unreachable_once_then_recovered_once(
        app, client, world, gateway, agents, tmp_path, fake_clock, https_receiver,  # noqa: F811
        smtp_receiver, trust_ca):  # noqa: F811
    settings = app.extensions["berth"].settings
    settings.update(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=trust_ca,
                    **smtp_receiver.settings())
    quiet = settings["ALERT_UNREACHABLE_SECONDS"]
    org = world.org()
    raw = world.key(org)[0]
    for kind, given in (("email", {"to": ["oncall@example.com"]}),
                        ("slack", {"url": https_receiver.url + "/slack/hook"})):
        r = client.post("/api/public/v1/notification-channels", headers=auth(raw), json={
            "type": kind, "settings": given, "events": ["server.unreachable"]})
        assert r.status_code == 201, r.json
    server, credential = registered_server(org)
    agent = agents(server, credential)
    wait_for(lambda: str(server.id) in gateway.sessions, what="agent connected")
    assert alerts.sweep(Plain(settings)) == 0
    agent.kill()
    wait_for(lambda: str(server.id) not in gateway.sessions, what="stream released")
    fake_clock.advance(seconds=quiet + 1)

    def swept(name):
        alerts.sweep(Plain(settings))
        return name in names(org)
    wait_for(lambda: swept("server.unreachable"), timeout=30, interval=0.5,
             what="server.unreachable")
    for _ in range(3):  # later turns of the job: nothing more for this outage
        fake_clock.advance(minutes=5)
        alerts.sweep(Plain(settings))
    assert names(org) == ["server.unreachable"]
    assert delivery.run(Plain(settings)) == 2  # where the people on call read
    (mail,) = smtp_receiver.wait_for(1)
    assert mail["Subject"] == f"[Berth] Server unreachable: {server.name}"
    (chat,) = https_receiver.wait_for(1)
    assert json.loads(chat.body)["text"].startswith("server.unreachable: Server unreachable")

    agents(server, credential)
    wait_for(lambda: swept("server.recovered"), timeout=30, interval=0.5,
             what="server.recovered")
    alerts.sweep(Plain(settings))
    assert names(org) == ["server.unreachable", "server.recovered"]
    event = Event.select().where(Event.name == "server.unreachable").get()
    assert event.data["server_id"] == str(server.id) and event.data["connection"] == "agent"


def test_a_container_crashing_in_a_loop_is_reported_by_the_agent(app, world, gateway, agents,
                                                                 labeled_container):
    org = world.org()
    server, credential = registered_server(org)
    env = world.environment(world.project(org, server), server=server)
    agents(server, credential)
    # An ERP whose process exits at once, which its restart policy starts again.
    labeled_container(env.id, "erp", ["sh", "-c", "exit 3"],
                      restart_policy={"Name": "always"})
    # The next heartbeats (every 15 s) carry the loop.
    wait_for(lambda: "environment.crash_loop" in names(org), timeout=60, interval=0.5,
             what="environment.crash_loop")
    event = Event.select().where(Event.name == "environment.crash_loop").get()
    assert event.data["environment_id"] == str(env.id) and event.data["role"] == "erp"
    assert event.data["restart_count"] >= 3 and event.project_id == env.project_id
    # Another heartbeat (every 15 s), still looping: no second event. Heartbeats are
    # recorded in batches: the one that said so (or a later one), then the next.
    def seen():
        return Server.get_by_id(server.id).last_seen_at

    said = wait_for(lambda: (at := seen()) >= event.created_at and at, timeout=40,
                    interval=0.5, what="the heartbeat recorded")
    wait_for(lambda: seen() > said, timeout=40, interval=0.5, what="another heartbeat")
    assert names(org) == ["environment.crash_loop"]
