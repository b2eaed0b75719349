"""Notification channels, the sending side, on both database backends: a fleet
alert the scheduler's sweep raised reaches every channel that follows it (e-mail
through a real SMTP server, the chat services through a real HTTPS receiver),
with the webhooks' retries, log and auto-pause."""

import datetime as dt
import json

import pytest

from control_plane.agent_link import Plain
from control_plane.infra.db import database
from control_plane.models import Server, Webhook, WebhookDelivery
from control_plane.services.servers import alerts
from control_plane.services.webhooks import delivery
from tests.conftest import auth
from tests.control_plane.webhooks.test_channels import C, chat_settings, create
from tests.support.smtp_receiver import smtp_receiver  # noqa: F401 - fixture
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures


@pytest.fixture
def settings(app, trust_ca, smtp_receiver):  # noqa: F811
    s = app.extensions["berth"].settings
    s.update(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=trust_ca, ALERT_UNREACHABLE_SECONDS=90,
             ALERT_HOLD_SECONDS=120, **smtp_receiver.settings())
    return s


def unreachable(world, org, fake_clock, settings, name="db-host-1"):
    """A server last heard of two minutes ago, and the sweep that finds it gone."""
    server = world.server(org, name=name)
    Server.update(last_seen_at=fake_clock.now - dt.timedelta(minutes=2)).where(
        Server.id == server.id).execute()
    assert alerts.sweep(Plain(settings)) == 1
    return server


def test_a_fleet_alert_reaches_the_email_and_chat_channels(
        client, world, fake_clock, settings, https_receiver, smtp_receiver):  # noqa: F811
    org = world.org()
    raw = world.key(org)[0]
    made = {kind: create(client, raw, kind, chat_settings(kind, https_receiver.url)).json
            for kind in ("slack", "telegram", "matrix")}
    made["email"] = create(client, raw, "email", {"to": ["oncall@example.com"]}).json
    other = create(client, raw, "ntfy", chat_settings("ntfy", https_receiver.url),
                   events=["deploy.failed"]).json  # follows something else
    server = unreachable(world, org, fake_clock, settings)

    assert delivery.run(Plain(settings)) == 4
    (mail,) = smtp_receiver.wait_for(1)
    assert mail.rcpt_tos == ["oncall@example.com"]
    assert mail["Subject"] == "[Berth] Server unreachable: db-host-1"
    text = mail.get_body(("plain",)).get_content()
    assert "Server unreachable" in text and str(server.id) in text
    got = {r.path.split("/")[1]: r for r in https_receiver.wait_for(3)}
    assert set(got) == {"slack", f"bot{chat_settings('telegram', '')['bot_token']}",
                        "_matrix"}
    slack = json.loads(got["slack"].body)
    assert slack["text"] == "server.unreachable: Server unreachable: db-host-1"
    assert slack["attachments"][0]["color"] == "#9E9E9E"
    for channel in made.values():
        (d,) = client.get(f"{C}/{channel['id']}/deliveries", headers=auth(raw)).json
        assert (d["event"], d["status"], d["attempt_count"]) == ("server.unreachable",
                                                                 "delivered", 1)
        assert Webhook.get_by_id(channel["id"]).last_triggered_at == fake_clock.now
    assert client.get(f"{C}/{other['id']}/deliveries", headers=auth(raw)).json == []


def test_a_failed_send_is_retried_and_matrix_keeps_one_transaction_id(
        client, world, fake_clock, settings, https_receiver, smtp_receiver):  # noqa: F811
    org = world.org()
    raw = world.key(org)[0]
    matrix = create(client, raw, "matrix", chat_settings("matrix", https_receiver.url)).json
    mail = create(client, raw, "email", {"to": ["oncall@example.com"]}).json
    https_receiver.respond(502)
    smtp_receiver.refuse(451)
    unreachable(world, org, fake_clock, settings)
    assert delivery.run(Plain(settings)) == 2
    for channel, reason in ((matrix, "HTTP 502"), (mail, "(SMTP 451)")):
        (d,) = client.get(f"{C}/{channel['id']}/deliveries", headers=auth(raw)).json
        assert (d["status"], d["attempt_count"]) == ("retrying", 1)
        assert reason in d["error_reason"]
    fake_clock.advance(seconds=40)  # past the first retry delay (30 s +-10 %)
    assert delivery.run(Plain(settings)) == 2
    first, second = https_receiver.wait_for(2)
    assert first.path == second.path and first.body == second.body  # one Matrix message
    assert len(smtp_receiver.wait_for(1)) == 1
    assert {d.status for d in WebhookDelivery.select()} == {"delivered"}


def test_a_channel_failing_ten_deliveries_is_paused_and_resumed(
        client, world, fake_clock, settings, https_receiver):  # noqa: F811
    org = world.org()
    raw = world.key(org)[0]
    made = create(client, raw, "ntfy", chat_settings("ntfy", https_receiver.url)).json
    with database.atomic():
        Webhook.update(failure_count=9).where(Webhook.id == made["id"]).execute()
    settings["WEBHOOK_RETRY_DELAYS"] = "1"  # two attempts
    https_receiver.respond(500, 500)
    unreachable(world, org, fake_clock, settings)
    delivery.run(Plain(settings))
    fake_clock.advance(seconds=2)
    delivery.run(Plain(settings))
    shown = client.get(f"{C}/{made['id']}", headers=auth(raw)).json
    assert (shown["is_active"], shown["failure_count"]) == (False, 10)
    r = client.patch(f"{C}/{made['id']}", headers=auth(raw), json={"is_active": True})
    assert (r.json["is_active"], r.json["failure_count"]) == (True, 0)


def test_a_name_with_a_line_break_is_one_line_of_subject(
        client, world, fake_clock, settings, smtp_receiver):  # noqa: F811
    org = world.org()
    raw = world.key(org)[0]
    create(client, raw, "email", {"to": ["oncall@example.com"]})
    unreachable(world, org, fake_clock, settings, name="db\nhost 2")
    assert delivery.run(Plain(settings)) == 1
    (mail,) = smtp_receiver.wait_for(1)
    assert mail["Subject"] == "[Berth] Server unreachable: db host 2"
