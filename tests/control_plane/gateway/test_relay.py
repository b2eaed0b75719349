"""Scale-out: web processes and gateway processes apart, live requests and
wake-ups carried by a real Redis."""

import pytest

from control_plane.gateway.relay import RedisRelay
from control_plane.gateway.server import Gateway
from control_plane.infra.ratelimit import RateLimiter
from control_plane.models import AgentCommand, Server
from control_plane.services import agents as agent_svc
from control_plane.services.tasks import queue
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for
from tests.support.services import Redis


@pytest.fixture
def remote_gateway(redis_server):
    """A gateway 'process' of its own, sharing only the database and Redis."""
    gw = Gateway(redis_url=redis_server.url)
    gw.start_in_thread("127.0.0.1:0")
    yield gw
    gw.stop_from_thread()


def test_live_request_reaches_an_agent_on_another_gateway(app, client, world, agents,
                                                           remote_gateway, redis_server):
    app.extensions["berth"].gateway = RedisRelay(redis_server.url)  # a web-only process
    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    world.environment(project, "running", server=server)
    raw, _ = world.key(org, "read_only")
    agents(server, credential, address=f"127.0.0.1:{remote_gateway.port}")
    wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
    wait_for(lambda: str(server.id) in remote_gateway.sessions, what="session held")
    r = client.get(f"/api/public/v1/servers/{server.id}/metrics", headers=auth(raw))
    assert r.status_code == 200, r.json
    assert r.json["memory_total_bytes"] > 0

    # A wake-up crosses too: the command arrives without waiting for the poll.
    command = queue.enqueue(server.id, "ping")
    app.extensions["berth"].gateway.wake(server.id)
    wait_for(lambda: AgentCommand.get_by_id(command.id).status == "succeeded", timeout=4,
             what="woken over Redis")


def test_nobody_holds_the_server(app, client, world, redis_server, remote_gateway):
    app.extensions["berth"].gateway = RedisRelay(redis_server.url)
    org = world.org()
    server = world.server(org)
    raw, _ = world.key(org, "read_only")
    r = client.get(f"/api/public/v1/servers/{server.id}/metrics", headers=auth(raw))
    assert r.status_code == 502 and r.json["error"] == "metrics_unavailable"


def test_embedded_gateway_falls_back_to_redis(app, client, world, agents, redis_server,
                                               remote_gateway):
    local = Gateway(redis_url=redis_server.url)
    local.start_in_thread("127.0.0.1:0")
    app.extensions["berth"].gateway = local
    try:
        org = world.org()
        server, credential = registered_server(org)
        raw, _ = world.key(org, "read_only")
        world.environment(world.project(org, server), "running", server=server)
        agents(server, credential, address=f"127.0.0.1:{remote_gateway.port}")
        wait_for(lambda: str(server.id) in remote_gateway.sessions, what="held remotely")
        r = client.get(f"/api/public/v1/servers/{server.id}/metrics", headers=auth(raw))
        assert r.status_code == 200, r.json
    finally:
        local.stop_from_thread()


def test_redis_stopped_and_started_degrades_and_recovers(app, client, world, agents):
    """With Redis away: API requests are answered (limits counted per process), a
    live request for a stream another process holds is a 502, a queued command still
    reaches its agent through the database poll; with Redis back, the relay works
    again without restarting anything."""
    redis = Redis()
    gw = Gateway(redis_url=redis.url)
    gw.start_in_thread("127.0.0.1:0")
    berth = app.extensions["berth"]
    berth.gateway, berth.limiter = RedisRelay(redis.url), RateLimiter(redis.url)
    try:
        org = world.org()
        server, credential = registered_server(org)
        world.environment(world.project(org, server), "running", server=server)
        raw, _ = world.key(org, "read_only")
        agents(server, credential, address=f"127.0.0.1:{gw.port}")
        wait_for(lambda: str(server.id) in gw.sessions, what="session held")
        metrics = f"/api/public/v1/servers/{server.id}/metrics"
        assert client.get(metrics, headers=auth(raw)).status_code == 200

        redis.stop()
        listed = client.get("/api/public/v1/projects", headers=auth(raw))
        assert listed.status_code == 200, listed.json
        assert listed.headers["X-RateLimit-Remaining"] == "119"  # counted here, meanwhile
        down = client.get(metrics, headers=auth(raw))
        assert down.status_code == 502 and down.json["error"] == "metrics_unavailable"
        command = queue.enqueue(server.id, "ping")
        berth.gateway.wake(server.id)  # dropped, not raised
        wait_for(lambda: AgentCommand.get_by_id(command.id).status == "succeeded", timeout=15,
                 what="delivered by the database poll")
        assert str(server.id) in gw.sessions  # the stream stayed up

        redis.start()
        wait_for(lambda: client.get(metrics, headers=auth(raw)).status_code == 200, timeout=30,
                 interval=1, what="relay back once Redis is")
    finally:
        gw.stop_from_thread()
        redis.stop()


def test_a_shell_session_crosses_redis_to_the_gateway_holding_the_agent(
        app, world, agents, remote_gateway, redis_server, docker_client, erp_image):
    """A web process without a gateway (scale-out): the session's opening, input and
    output go through Redis to the gateway process holding the agent's stream."""
    from agent.deploy.environments import Environments
    from tests.support.shell_client import open_shell, serve_app

    app.extensions["berth"].gateway = RedisRelay(redis_server.url)
    url = serve_app(app)
    org = world.org()
    server, credential = registered_server(org)
    env = world.environment(world.project(org, server), "running", server=server)
    raw, _ = world.key(org)
    agents(server, credential, address=f"127.0.0.1:{remote_gateway.port}")
    wait_for(lambda: str(server.id) in remote_gateway.sessions, what="session held")
    name = Environments(docker_client)._names(str(env.id))["erp"]
    container = docker_client.containers.run(erp_image, ["sleep", "300"], name=name,
                                             detach=True, entrypoint=[])
    try:
        r, sh = open_shell(url, auth(raw), env.id, tty=False, command=["sh", "-c", "cat; exit 4"])
        assert r.status_code == 201, r.text
        sh.read_until(lambda x: x.messages)
        sh.send("through redis\n")
        sh.output_has("through redis")
        sh.control(type="eof")
        sh.ended()
        assert sh.exit_code == 4

        # A client that goes away: the session ends on the gateway's side too.
        r, sh = open_shell(url, auth(raw), env.id, command=["sleep", "4243"])
        sh.read_until(lambda x: x.messages)
        sh.close()
        wait_for(lambda: "4243" not in str(container.top()["Processes"]), timeout=20,
                 what="the relayed session hung up")
        wait_for(lambda: not remote_gateway.relay.shells, timeout=10,
                 what="the gateway's relay forgot the session")
    finally:
        container.remove(force=True)

    # Nobody holds the server: refused at once.
    other = world.environment(world.project(org, world.server(org)), "running")
    r, sh = open_shell(url, auth(raw), other.id, command=["true"])
    sh.ended(timeout=15)
    assert sh.error["code"] == "server_unreachable"
