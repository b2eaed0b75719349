"""What the scale-out stack keeps when a part of it goes: an X-Idempotency-Key holds
whichever web process a duplicate reaches (the records are in the database); a
scheduler killed with SIGKILL while it sends webhooks loses no event (its claimed
deliveries go out from the other scheduler once the claim lapses: at least once, so
only those in flight may arrive twice); and with Redis stopped, requests are answered
and a deployment completes through the database poll, and once Redis is back the
rate limit is shared again and live requests reach every agent."""

import json
import threading
import time
import uuid
from collections import defaultdict

import pytest

from control_plane.services.webhooks.delivery import CLAIM_SECONDS
from tests.support.agents import wait_for
from tests.support.scale_out import STACK, Agent, docker
from tests.support.webhook_receiver import Receiver, _ca

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def idle_server(stack, org, tmp_path_factory):
    """A registered server whose agent never runs: what is deployed on it stays queued."""
    agent = Agent(tmp_path_factory.mktemp("idle"), "idle")
    return agent.register(stack.url, stack.registration_token(org, "idle"))


def test_an_idempotency_key_holds_across_web_processes(stack, org, idle_server):
    key = stack.key(org, "idempotent")
    body = {"name": "once", "server_id": idle_server}
    same = {"X-Idempotency-Key": str(uuid.uuid4())}
    answers = [stack.api("POST", key, "/projects", body, same) for _ in range(4)]
    assert [r.status_code for r in answers] == [201] * 4, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    assert [r.headers.get("X-Idempotency-Replayed") for r in answers] == [None] + ["true"] * 3
    assert len(stack.served_by(answers)) == 2

    # The same key sent at once to both: one creates, the rest are told it is in flight
    # or get its answer.
    same, body = {"X-Idempotency-Key": str(uuid.uuid4())}, {**body, "name": "at-once"}
    answers = [None] * 8

    def send(i):
        answers[i] = stack.api("POST", key, "/projects", body, same)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {r.status_code for r in answers} <= {201, 409}, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers if r.status_code == 201}) == 1
    listed = stack.api("GET", org["read"], "/projects?limit=100").json()["data"]
    assert [p["name"] for p in listed].count("at-once") == 1


def test_a_scheduler_killed_while_sending_webhooks_loses_no_event(stack, tmp_path):
    # An organization of its own: 10 deployments a minute are its whole allowance.
    org = stack.new_org("hooks")
    key = org["key"]
    idle_server = Agent(tmp_path, "idle").register(stack.url,
                                                   stack.registration_token(org, "idle"))
    receiver = Receiver(_ca()[0], host=stack.bridge_address())
    receiver.hang(3.0)  # each delivery is in flight for 3 s
    try:
        hook = stack.api("POST", key, "/webhooks", {"url": receiver.url + "/hook",
                                                       "events": ["environment.created"]})
        assert hook.status_code == 201, hook.text
        project = stack.api("POST", key, "/projects", {"name": "hooked",
                                                          "server_id": idle_server})
        assert project.status_code == 201, project.text
        envs = project.json()["id"], []

        def create(n):
            for _ in range(n):
                env = stack.api("POST", key, f"/projects/{envs[0]}/environments",
                            {"name": f"env-{len(envs[1])}"})
                assert env.status_code == 201, env.text
                envs[1].append(env.json()["id"])

        create(5)
        arrived = receiver.wait_for(1, timeout=30)
        assert arrived, "no delivery started"
        first = arrived[0]
        sender = stack.container_at(first.client)
        schedulers = stack.containers("scheduler")
        assert sender and any(sender.startswith(c) for c in schedulers), (first.client, schedulers)
        docker("kill", "--signal", "KILL", sender)  # with deliveries in flight
        killed_at = time.time()
        create(5)  # and events after it: fanned out by the other scheduler

        def every_delivery_answered():
            log = stack.api("GET", org["read"], f"/webhooks/{hook.json()['id']}/deliveries")
            return len(log.json()) == 10 and {d["status"] for d in log.json()} == {"delivered"}

        wait_for(every_delivery_answered, timeout=CLAIM_SECONDS + 60, interval=1,
                 what="every delivery answered")
        time.sleep(3)  # anything still going out
    finally:
        receiver.close()
    deliveries = defaultdict(list)
    for r in receiver.requests:
        deliveries[_environment(r)].append(r)
    assert set(deliveries) == set(envs[1])
    twice = {env: got for env, got in deliveries.items() if len(got) > 1}
    assert _environment(first) in twice  # in flight when its sender died: sent again
    # At least once: only a delivery the killed scheduler had in flight comes again.
    for got in twice.values():
        assert len(got) == 2, got
        assert got[0].client == first.client and got[0].time <= killed_at, got
        assert got[1].time >= got[0].time + CLAIM_SECONDS - 5, got  # once the claim lapsed
    assert len({json.loads(r.body)["event_id"] for r in receiver.requests}) == 10


def _environment(received):
    return json.loads(received.body)["data"]["environment_id"]


def test_with_redis_stopped_work_goes_on_and_resumes_sharing_when_it_is_back(
        stack, org, agents):
    agents, deployed = agents
    key = stack.key(org, "redis-away")
    docker("service", "scale", f"{STACK}_redis=0", timeout=120)
    try:
        # Requests are answered (each web process counts the rate limit on its own).
        assert stack.api("GET", org["read"], "/projects").status_code == 200
        # A deployment completes: its command waits in the database for the gateway's poll.
        agent = agents[0]
        project = stack.api("POST", key, "/projects",
                        {"name": "no-redis", "server_id": agent.server_id})
        assert project.status_code == 201, (project.text, stack.errors())
        env = stack.api("POST", key, f"/projects/{project.json()['id']}/environments",
                    {"name": "Redis away"})
        assert env.status_code == 201, (env.text, stack.errors())
        deployed.append((agent, env.json()["id"]))

        def status():
            return stack.api("GET", org["read"],
                         f"/environments/{env.json()['id']}/status").json().get("status")

        wait_for(lambda: status() in ("running", "failed", "error"), timeout=180, interval=1,
                 what="the deployment finished without Redis")
        assert status() == "running"
    finally:
        docker("service", "scale", f"{STACK}_redis=1", timeout=120)

    # Back: one count across both web processes again, and live requests reach every
    # agent whichever gateway holds it (the gateways subscribed again by themselves).
    for _ in range(8):  # each web process's pool finds its connections broken, once
        stack.api("GET", org["read"], "/projects")
    shared = stack.key(org, "redis-back")
    codes = [stack.api("GET", shared, "/projects").status_code for _ in range(26)]
    assert codes.count(200) == 20 and codes.count(429) == 6, codes

    def live_everywhere():
        return all(stack.api("GET", org["read"], f"/servers/{a.server_id}/metrics")
                   .status_code == 200 for a in agents)

    wait_for(live_everywhere, timeout=30, interval=1, what="live requests relayed again")
