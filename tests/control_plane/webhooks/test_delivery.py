"""Outgoing webhooks, sending side: fan-out of the event outbox, the payload
formats and signatures, retries on the schedule, auto-pause, claims shared by
racing workers, the delivery log, and a retry that survives `kill -9`; against a
real HTTPS receiver, on both database backends."""

import collections
import datetime as dt
import json
import signal
import threading
import time
from uuid import UUID

import pytest
import standardwebhooks

from control_plane import events
from control_plane.agent_link import Plain
from control_plane.infra import config, secretbox
from control_plane.infra.db import database
from control_plane.models import Event, Webhook, WebhookDelivery
from control_plane.services.tasks import engine
from control_plane.services.webhooks import delivery, fanout, subscriptions, urls
from tests.conftest import auth
from tests.support.agents import wait_for
from tests.support.serve import Served
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

P = "/api/public/v1"


@pytest.fixture
def settings(app, trust_ca):  # noqa: F811 - fixture by name
    """The app's settings, with the test receiver reachable and trusted."""
    s = app.extensions["berth"].settings
    s["WEBHOOK_ALLOW_PRIVATE"] = True
    s["WEBHOOK_CA_BUNDLE"] = trust_ca
    return s


@pytest.fixture
def receiver(https_receiver, settings):  # noqa: F811
    return https_receiver


def hook(org, url, events=("deploy.completed",), fmt="raw", project=None, active=True):
    """A webhook row with a sealed Standard Webhooks secret: (webhook, secret)."""
    secret = subscriptions.new_secret()
    w = Webhook.create(organization=org, project=project, url=url, events=list(events),
                       format=fmt, is_active=active,
                       secret_encrypted=secretbox.seal(secret, subscriptions.SECRET_PURPOSE))
    return w, secret


def event(org, project, name="deploy.completed", **data):
    data = {"environment_id": "env-1", "project_id": str(project.id), "task_id": "task-1",
            "status": "completed", "duration_seconds": 42, **data}
    with database.atomic():
        events.record_event(org.id, project.id, name, data)
    return Event.select().order_by(Event.created_at.desc()).first()


def delivery_of(w):
    return WebhookDelivery.get(WebhookDelivery.webhook == w.id)


def body(received):
    return json.loads(received.body)


def test_raw_delivery_carries_the_envelope_and_both_signatures(app, world, fake_clock, settings,
                                                               receiver):
    org = world.org()
    project = world.project(org)
    w, secret = hook(org, receiver.url + "/in")
    ev = event(org, project)
    assert delivery.run(Plain(settings)) == 1
    (got,) = receiver.wait_for(1)
    assert got.path == "/in" and got.method == "POST"
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["User-Agent"] == "Berth-Webhooks/1"
    assert receiver.verify(got, secret)
    assert got.headers["webhook-id"] == str(ev.event_id)
    assert int(got.headers["webhook-timestamp"]) == int(
        fake_clock.now.replace(tzinfo=dt.UTC).timestamp())
    headers = {k: v for k, v in got.headers.items()}
    assert standardwebhooks.Webhook(secret).verify(got.body, headers) == body(got)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(subscriptions.new_secret()).verify(got.body, headers)
    assert body(got) == {
        "event_id": str(ev.event_id), "event": "deploy.completed",
        "timestamp": ev.created_at.isoformat(timespec="milliseconds") + "Z",
        "organization_id": str(org.id), "data": ev.data}
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.response_status) == ("delivered", 1, 200)
    assert d.response_body == '{"ok": true}' and d.error_reason is None
    assert d.duration_ms is not None and d.delivered_at == fake_clock.now
    assert d.next_attempt_at is None and d.claimed_until is None
    w = Webhook.get_by_id(w.id)
    assert w.failure_count == 0 and w.last_triggered_at == fake_clock.now
    assert Event.get_by_id(ev.id).fanned_out
    assert delivery.run(Plain(settings)) == 0  # nothing twice


def test_deploy_flow_events_carry_their_documented_data(app, world, settings, receiver):
    org = world.org()
    project = world.project(org)
    env = world.environment(project, status="running")
    hook(org, receiver.url, events=["deploy.started", "deploy.completed",
                                    "environment.status_changed"])
    with database.atomic():
        d = engine.start(env, "redeploy", berth=Plain(settings), trigger="manual")
    engine.on_ack(d.id)
    engine.on_result(d.id, True, {}, None)
    delivery.run(Plain(settings))
    got = collections.defaultdict(list)
    for b in map(body, receiver.wait_for(4)):
        got[b["event"]].append(b["data"])
    ids = {"environment_id": str(env.id), "project_id": str(project.id)}
    what = {"task_id": str(d.id), "kind": "redeploy", "trigger": "manual"}
    assert got["deploy.started"] == [{**ids, **what}]
    [completed] = got["deploy.completed"]
    assert set(completed) == {"environment_id", "project_id", "task_id", "kind", "trigger",
                              "status", "duration_seconds"}
    assert completed["status"] == "completed" and completed["task_id"] == str(d.id)
    assert isinstance(completed["duration_seconds"], int)
    moves = sorted((m["from"], m["to"]) for m in got["environment.status_changed"])
    assert moves == [("deploying", "running"), ("running", "deploying")]
    assert all(m.keys() == {"environment_id", "project_id", "from", "to"}
               for m in got["environment.status_changed"])


@pytest.mark.parametrize("name,colour,style", [
    ("deploy.completed", "#2EB67D", "good"), ("deploy.failed", "#E01E5A", "attention"),
    ("deploy.cancelled", "#9E9E9E", "default")])
def test_chat_formats_have_their_layout_and_colour(app, world, settings, receiver, name, colour,
                                                   style):
    org = world.org()
    project = world.project(org)
    for fmt in ("blocks", "cards", "embed"):
        hook(org, f"{receiver.url}/{fmt}", events=[name], fmt=fmt)
    ev = event(org, project, name, status=name.split(".")[1])
    delivery.run(Plain(settings))
    got = {r.path.strip("/"): r for r in receiver.wait_for(3)}
    assert set(got) == {"blocks", "cards", "embed"}
    for r in got.values():
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["X-SVC-Signature"] is None and r.headers["webhook-signature"] is None
    slack = body(got["blocks"])
    assert name in slack["text"]
    (att,) = slack["attachments"]
    assert att["color"] == colour
    assert att["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": name}}
    fields = {f["text"] for f in att["blocks"][2]["fields"]}
    assert "*Task*\ntask-1" in fields and "*Duration*\n42 s" in fields
    teams = body(got["cards"])
    assert teams["type"] == "message"
    (card,) = teams["attachments"]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    content = card["content"]
    assert content["type"] == "AdaptiveCard"
    head = content["body"][0]
    assert head["style"] == style and head["items"][0]["text"] == name
    facts = next(b for b in content["body"] if b["type"] == "FactSet")["facts"]
    assert {"title": "Project", "value": str(project.id)} in facts
    (discord,) = body(got["embed"])["embeds"]
    assert discord["title"] == name and discord["color"] == int(colour[1:], 16)
    assert discord["timestamp"] == ev.created_at.isoformat(timespec="milliseconds") + "Z"
    assert {"name": "Status", "value": name.split(".")[1], "inline": True} in discord["fields"]


def _due_in(w, now):
    return (delivery_of(w).next_attempt_at - now).total_seconds()


def test_failed_attempts_are_retried_on_the_schedule_with_one_event_id(
        app, world, fake_clock, settings, receiver):
    org = world.org()
    project = world.project(org)
    w, secret = hook(org, receiver.url)
    ev = event(org, project)
    receiver.respond(500, 500, 500, then=200)
    delays = []
    for attempt, nominal in enumerate((30, 300, 1800), start=1):
        delivery.run(Plain(settings))
        assert len(receiver.wait_for(attempt)) == attempt
        d = delivery_of(w)
        assert (d.status, d.attempt_count, d.response_status) == ("retrying", attempt, 500)
        assert d.error_reason == "HTTP 500" and d.response_body == '{"ok": false}'
        delay = _due_in(w, fake_clock.now)
        assert nominal * 0.9 <= delay <= nominal * 1.1
        delays.append(delay)
        fake_clock.advance(seconds=nominal * 0.85)  # not yet due
        assert delivery.run(Plain(settings)) == 0
        fake_clock.advance(seconds=delay - nominal * 0.85)
    assert delivery.run(Plain(settings)) == 1
    got = receiver.wait_for(4)
    assert len(got) == 4
    assert {body(r)["event_id"] for r in got} == {str(ev.event_id)}
    assert {r.headers["webhook-id"] for r in got} == {str(ev.event_id)}
    assert len({r.body for r in got}) == 1 and all(receiver.verify(r, secret) for r in got)
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.response_status, d.error_reason) == (
        "delivered", 4, 200, None)
    assert Webhook.get_by_id(w.id).failure_count == 0


def _round(settings, fake_clock, hours=3):
    delivery.run(Plain(settings))
    fake_clock.advance(hours=hours)


def test_ten_failed_deliveries_pause_the_webhook_until_patched_active(
        app, client, world, fake_clock, settings, receiver):
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    receiver.respond(then=503)
    for _ in range(10):
        event(org, project)
    for _ in range(4):
        _round(settings, fake_clock)
    late = event(org, project)  # still has attempts left when the webhook pauses
    assert Webhook.get_by_id(w.id).failure_count == 0
    delivery.run(Plain(settings))
    assert len(receiver.wait_for(51)) == 51
    rows = list(WebhookDelivery.select().where(WebhookDelivery.webhook == w.id))
    failed = [r for r in rows if r.event_id != late.id]
    assert {(r.status, r.attempt_count, r.next_attempt_at) for r in failed} == {("failed", 5, None)}
    w = Webhook.get_by_id(w.id)
    assert (w.is_active, w.failure_count) == (False, 10)
    pending = WebhookDelivery.get(WebhookDelivery.event == late.id)
    assert (pending.status, pending.attempt_count) == ("retrying", 1)
    # Paused: the pending retry waits, and a new event is not queued for it.
    fake_clock.advance(hours=3)
    unsent = event(org, project)
    assert delivery.run(Plain(settings)) == 0
    assert len(receiver.requests) == 51
    assert not WebhookDelivery.select().where(WebhookDelivery.event == unsent.id).exists()
    # Re-enabled by PATCH: the pending one goes out, and succeeds.
    receiver.respond(then=200)
    raw, _key = world.key(org)
    r = client.patch(f"{P}/webhooks/{w.id}", headers=auth(raw), json={"is_active": True})
    assert r.status_code == 200, r.json
    assert delivery.run(Plain(settings)) == 1
    assert body(receiver.wait_for(52)[-1])["event_id"] == str(late.event_id)
    w = Webhook.get_by_id(w.id)
    assert (w.is_active, w.failure_count) == (True, 0)
    assert WebhookDelivery.get_by_id(pending.id).status == "delivered"


def test_a_redirect_is_a_failure_and_is_not_followed(app, world, settings, receiver):
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url + "/old")
    receiver.redirect(receiver.url + "/new", path="/old")
    event(org, project)
    delivery.run(Plain(settings))  # returns once the receiver answered: its requests are in
    assert [r.path for r in receiver.wait_for(1)] == ["/old"]
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.response_status) == ("retrying", 1, 302)
    assert "redirect" in d.error_reason


def test_a_receiver_slower_than_the_timeout_is_a_failure(app, world, settings, receiver):
    assert delivery.timeout_of({"WEBHOOK_TIMEOUT_SECONDS": "60"}) == 10.0
    assert delivery.timeout_of({}) == 10.0
    settings["WEBHOOK_TIMEOUT_SECONDS"] = "1"
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    receiver.hang(8)
    event(org, project)
    started = time.monotonic()
    delivery.run(Plain(settings))
    assert time.monotonic() - started < 5
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.response_status) == ("retrying", 1, None)
    assert "timed out" in d.error_reason and 900 <= d.duration_ms < 5000


def test_two_workers_racing_send_each_delivery_once_per_due_time(app, world, fake_clock,
                                                                settings, receiver):
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    events = [event(org, project) for _ in range(40)]
    receiver.respond(then=500)

    def race():
        barrier = threading.Barrier(2)
        errors = []

        def worker():
            try:
                barrier.wait()
                delivery.run(Plain(settings))
            except Exception as exc:  # surfaced below
                errors.append(exc)
            finally:
                database.close()

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors

    race()
    got = receiver.wait_for(40)
    assert sorted(body(r)["event_id"] for r in got) == sorted(str(e.event_id) for e in events)
    fake_clock.advance(seconds=40)
    race()
    assert len(receiver.wait_for(80)) == 80
    assert {r.attempt_count for r in WebhookDelivery.select()} == {2}


def test_a_lapsed_claim_is_taken_over(app, world, fake_clock, settings, receiver):
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    event(org, project)
    fanout.fan_out()
    assert len(delivery.claim_due()) == 1  # a worker that died holding it
    assert delivery.run(Plain(settings)) == 0
    fake_clock.advance(seconds=delivery.CLAIM_SECONDS + 1)
    assert delivery.run(Plain(settings)) == 1
    assert delivery_of(w).status == "delivered"


def test_webhooks_get_the_events_they_match_only(app, world, settings, receiver):
    org, other_org = world.org(), world.org()
    a, b = world.project(org), world.project(org)
    hook(org, receiver.url + "/org-wide")
    hook(org, receiver.url + "/project-a", project=a)
    hook(org, receiver.url + "/project-b", project=b)
    hook(org, receiver.url + "/inactive", active=False)
    hook(org, receiver.url + "/other-events", events=["environment.created"])
    hook(org, receiver.url + "/alias", events=["deployment.completed"])
    hook(other_org, receiver.url + "/other-org")
    event(org, a)
    delivery.run(Plain(settings))
    assert sorted(r.path for r in receiver.wait_for(3)) == ["/alias", "/org-wide", "/project-a"]


def test_delivery_log_keeps_the_50_most_recent(app, client, world, fake_clock, settings,
                                               receiver):
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    first = [event(org, project) for _ in range(30)]
    delivery.run(Plain(settings))
    fake_clock.advance(minutes=1)
    second = [event(org, project) for _ in range(30)]
    delivery.run(Plain(settings))
    assert len(receiver.wait_for(60)) == 60
    kept = {d.event_id for d in WebhookDelivery.select().where(WebhookDelivery.webhook == w.id)}
    assert len(kept) == 50
    assert {e.id for e in second} <= kept and len(kept & {e.id for e in first}) == 20
    raw, _key = world.key(org)
    r = client.get(f"{P}/webhooks/{w.id}/deliveries", headers=auth(raw))
    assert r.status_code == 200 and len(r.json) == 50
    entry = r.json[0]
    assert {"id", "event", "status", "attempt_count", "response_status", "response_body",
            "error_reason", "duration_ms", "delivered_at", "created_at"} <= set(entry)
    assert entry["event"] == "deploy.completed" and entry["status"] == "delivered"
    assert entry["attempt_count"] == 1 and entry["response_status"] == 200


@pytest.mark.slow
def test_a_retry_due_while_the_server_was_killed_still_happens(app, world, backend, tmp_path,
                                                               settings, receiver):
    env = {"CP_SECRET_KEY": app.config["SECRET_KEY"], "CP_WEBHOOK_ALLOW_PRIVATE": "1",
           "CP_WEBHOOK_CA_BUNDLE": settings["WEBHOOK_CA_BUNDLE"],
           "CP_WEBHOOK_RETRY_DELAYS": "4,4,4,4", "CP_WEBHOOK_POLL_SECONDS": "0.2"}
    if backend == "postgres":
        env["CP_DATABASE_URL"] = app.config["DATABASE_URL"]
    org = world.org()
    project = world.project(org)
    w, secret = hook(org, receiver.url)
    ev = event(org, project)
    receiver.respond(500, then=200)
    served = Served(app.config["DATA_DIR"], env).start()
    try:
        receiver.wait_for(1, timeout=20)
        wait_for(lambda: delivery_of(w).attempt_count == 1, timeout=20, what="attempt 1 recorded")
    finally:
        served.proc.send_signal(signal.SIGKILL)
        served.proc.wait(10)
        served.log.close()
    assert delivery_of(w).status == "retrying" and len(receiver.requests) == 1
    served = Served(app.config["DATA_DIR"], env).start()
    try:
        wait_for(lambda: delivery_of(w).status == "delivered", timeout=30, what="the retry")
    finally:
        served.stop()
    got = receiver.requests
    assert len(got) == 2 and {r.headers["webhook-id"] for r in got} == {str(ev.event_id)}
    assert receiver.verify(got[1], secret) and delivery_of(w).attempt_count == 2


def test_a_stream_of_events_goes_out_without_waiting_for_the_next_turn(app, world, settings,
                                                                        receiver):
    from control_plane.scheduler import Scheduler, jobs

    org = world.org()
    project = world.project(org)
    hook(org, receiver.url)
    loop = Scheduler(jobs(Plain(settings))).start_in_thread()
    try:
        event(org, project)  # the turn that sends it goes on looking
        receiver.wait_for(1, timeout=10)
        sent = {}
        for _ in range(20):
            ev = event(org, project)
            sent[str(ev.event_id)] = time.time()
            time.sleep(0.1)
        got = {body(r)["event_id"]: r.time for r in receiver.wait_for(21, timeout=10)[1:]}
    finally:
        loop.stop()
    assert set(got) == set(sent)
    lags = sorted(got[e] - sent[e] for e in sent)
    assert lags[-1] < 0.75 and lags[10] < 0.3, lags  # not the next turn, a second away


def test_a_burst_keeps_the_newest_50_deliveries_in_event_order(app, client, world, settings,
                                                                receiver):
    """One fan-out turn gives every delivery of the burst a distinct created_at in
    the events' order: pruning and the log follow the events, not random ids."""
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    burst = [event(org, project) for _ in range(60)]
    assert [e.created_at for e in burst] == sorted({e.created_at for e in burst})
    assert fanout.fan_out() == 60  # one turn
    delivery.run(Plain(settings))
    assert len(receiver.wait_for(60)) == 60
    event_of = {d.id: d.event_id for d in WebhookDelivery.select()}
    assert sorted(event_of.values()) == sorted(e.id for e in burst[10:])
    raw, _key = world.key(org)
    r = client.get(f"{P}/webhooks/{w.id}/deliveries", headers=auth(raw))
    assert r.status_code == 200
    assert [event_of[UUID(d["id"])] for d in r.json] == [e.id for e in reversed(burst[10:])]


def test_a_name_resolving_to_a_private_address_is_refused_when_sending(
        app, world, settings, receiver, monkeypatch):
    """Stored by name (allowed when saved: DNS can change), refused at send time
    because the name now resolves to loopback; nothing reaches the receiver."""
    from control_plane.services.webhooks import net

    settings["WEBHOOK_ALLOW_PRIVATE"] = False
    monkeypatch.setattr(net, "resolve", lambda host, port: ["127.0.0.1"])
    org = world.org()
    project = world.project(org)
    url = f"https://rebind.example.test:{receiver.port}/in"
    assert urls.check_url(url) == url
    w, _ = hook(org, url)
    event(org, project)
    assert delivery.run(Plain(settings)) == 1
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.response_status) == ("retrying", 1, None)
    assert d.error_reason == ("refused: rebind.example.test resolves to 127.0.0.1 "
                              "(loopback address)")
    assert receiver.wait_for(1, timeout=0.3) == []  # and none comes


def test_bad_retry_delays_fail_at_load_and_before_any_send(app, world, settings, receiver,
                                                          tmp_path):
    with pytest.raises(ValueError, match="CP_WEBHOOK_RETRY_DELAYS"):
        config.load({"DATA_DIR": str(tmp_path)}, environ={"CP_WEBHOOK_RETRY_DELAYS": "30,5m"})
    loaded = config.load({"DATA_DIR": str(tmp_path)},
                         environ={"CP_WEBHOOK_RETRY_DELAYS": "1, 2.5"})
    assert delivery.retry_delays(loaded) == (1.0, 2.5)
    assert delivery.retry_delays({}) == (30, 300, 1800, 7200)
    # Settings changed after loading: the job refuses before sending anything.
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    event(org, project)
    fanout.fan_out()  # a delivery due now
    for bad in ("30,-1", "nan", "30,,300", "soon"):
        settings["WEBHOOK_RETRY_DELAYS"] = bad
        with pytest.raises(ValueError, match="CP_WEBHOOK_RETRY_DELAYS"):
            delivery.run(Plain(settings))
    assert receiver.wait_for(1, timeout=0.3) == []  # and none comes
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.claimed_until) == ("retrying", 0, None)


def test_a_slow_receiver_holds_its_own_share_of_the_senders_only(app, world, settings, receiver):
    """At most MAX_PER_RECEIVER sends at once to one receiver: another receiver's
    deliveries go out while the slow one's wait their turn."""
    from control_plane.services.webhooks import senders
    from tests.support.webhook_receiver import Receiver, _ca

    fast = Receiver(_ca()[0])
    try:
        org = world.org()
        project = world.project(org)
        hook(org, receiver.url + "/slow")
        hook(org, fast.url + "/fast")
        receiver.hang(1.5)
        for _ in range(12):
            event(org, project)
        started = time.monotonic()
        worker = threading.Thread(target=delivery.run, args=(Plain(settings),))
        worker.start()
        assert len(fast.wait_for(12, timeout=10)) == 12
        fast_done = time.monotonic() - started
        worker.join(60)
    finally:
        fast.close()
    assert fast_done < 1.4, fast_done  # not behind the slow receiver's hangs
    got = receiver.wait_for(12)
    assert len(got) == 12
    first = min(r.time for r in got)
    # Requests to the slow receiver come in rounds of at most its share.
    assert len([r for r in got if r.time < first + 1.0]) == senders.MAX_PER_RECEIVER
    assert WebhookDelivery.select().where(WebhookDelivery.status == "delivered").count() == 24


def test_a_delivery_whose_claim_would_lapse_during_the_send_is_given_back_unsent(
        app, world, fake_clock, settings, receiver):
    """Sending with less than the timeout (and a margin) left on the claim could
    let another worker take it over and send it again: it is not sent, its claim
    is released and no attempt is counted."""
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    event(org, project)
    fanout.fan_out()
    (job,) = delivery.claim_due()
    fake_clock.advance(seconds=delivery.CLAIM_SECONDS - 12)  # 12 s left; the timeout is 10
    assert delivery.record([delivery.send(job, settings)], delivery.retry_delays(settings)) == 0
    assert receiver.wait_for(1, timeout=0.3) == []
    d = delivery_of(w)
    assert (d.status, d.attempt_count, d.claimed_until) == ("retrying", 0, None)
    assert delivery.run(Plain(settings)) == 1  # the next claim sends it at once
    assert len(receiver.wait_for(1)) == 1 and delivery_of(w).status == "delivered"


def test_deliveries_waiting_their_turn_are_not_sent_once_the_webhook_is_paused(
        app, world, fake_clock, settings, receiver):
    """Twenty deliveries on their last attempt, a few sent at a time to a failing
    receiver: the tenth failure pauses the webhook, and those still waiting for a
    sender stay pending, unsent and unclaimed."""
    org = world.org()
    project = world.project(org)
    w, _ = hook(org, receiver.url)
    for _ in range(20):
        event(org, project)
    fanout.fan_out()
    WebhookDelivery.update(attempt_count=4).execute()  # the fifth attempt is the last
    receiver.hang(0.5, then=503)
    delivery.run(Plain(settings))
    sent = len(receiver.requests)
    assert 10 <= sent < 20, sent
    w = Webhook.get_by_id(w.id)
    assert (w.is_active, w.failure_count) == (False, sent)
    rows = list(WebhookDelivery.select())
    assert len([r for r in rows if r.status == "failed"]) == sent
    waiting = [r for r in rows if r.status == "retrying"]
    assert len(waiting) == 20 - sent
    assert {(r.attempt_count, r.claimed_until) for r in waiting} == {(4, None)}
