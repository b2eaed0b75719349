"""The console's notification channels, on both database backends: a channel of
each kind of form is added, tested against a real receiver, paused, resumed and
deleted after asking; a refused setting is said beside its field; no secret is
ever written back into a page."""

import re

from control_plane.models import Webhook
from control_plane.services.webhooks import delivery
from tests.control_plane.console.test_console_operations import _field_error, _status
from tests.control_plane.console.test_console_pages import _text, member, receiver  # noqa: F401
from tests.control_plane.webhooks.test_channel_delivery import unreachable
from tests.support.smtp_receiver import smtp_receiver  # noqa: F401 - fixture
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

TOKEN = "123456789:AAE-abcdefghijklmnopqrstuvwxyz_0123"


def test_a_telegram_channel_is_added_tested_paused_and_deleted(app, world, member, receiver,  # noqa: F811
                                                               fake_clock):
    org, b = member
    page = _text(b.get("/channels"))
    assert "No notification channels." in page
    for title in ("E-mail", "Slack", "Discord", "Microsoft Teams", "Telegram", "Matrix", "ntfy"):
        assert f"<summary>{title}</summary>" in page
    assert "CP_SMTP_HOST" in page  # e-mail needs the operator's SMTP server
    r = b.post("/channels/new/telegram", {"bot_token": TOKEN, "chat_id": "-1001",
                                          "api_url": receiver.url,
                                          "events": ["server.unreachable", "deploy.failed"],
                                          "description": "On call"})
    assert r.status_code == 303, _text(r)
    page = _text(b.get(r.headers["Location"]))
    assert "The channel is added." in page and f"<h1>Telegram: {receiver.url}</h1>" in page
    assert TOKEN not in page and "server.unreachable, deploy.failed" in page
    channel = Webhook.get(Webhook.channel == "telegram")

    said = _status(_text(b.post(f"/channels/{channel.id}/test")))
    assert re.search(r"The test message was accepted \(200\) in \d+ ms", said), said
    (got,) = receiver.wait_for(1)
    assert got.path == f"/bot{TOKEN}/sendMessage"
    receiver.respond(then=401)
    said = _status(_text(b.post(f"/channels/{channel.id}/test")))
    assert "The test message failed: HTTP 401" in said, said

    receiver.respond(then=200)
    unreachable(world, org, fake_clock, app.extensions["berth"].settings)
    delivery.run(app.extensions["berth"])
    page = _text(b.get(f"/channels/{channel.id}"))
    assert "<td data-label=\"Event\">server.unreachable</td>" in page and "delivered" in page
    listed = _text(b.get("/channels"))
    assert f"Telegram: {receiver.url}" in listed and TOKEN not in listed

    r = b.post(f"/channels/{channel.id}/pause")
    assert r.status_code == 303 and not Webhook.get_by_id(channel.id).is_active
    assert "The channel is paused." in _text(b.get(r.headers["Location"]))
    b.post(f"/channels/{channel.id}/resume")
    assert Webhook.get_by_id(channel.id).is_active
    asked = _text(b.post(f"/channels/{channel.id}/delete"))
    assert "Delete the Telegram channel to" in asked and Webhook.select().count() == 1
    r = b.post(f"/channels/{channel.id}/delete", {"confirmed": "1"})
    assert r.status_code == 303 and Webhook.select().count() == 0


def test_a_refused_setting_is_said_beside_its_field_and_no_secret_comes_back(
        app, world, member, receiver, smtp_receiver):  # noqa: F811
    org, b = member
    app.extensions["berth"].settings.update(smtp_receiver.settings())
    r = b.post("/channels/new/matrix", {"homeserver": "http://matrix.example.org",
                                        "room_id": "nope", "access_token": "syt_hidden",
                                        "events": ["deploy.failed"]}, referer="/channels")
    page = _text(r)
    assert r.status_code == 422
    assert _field_error(page, "matrix-room_id").startswith("A room id")
    assert "syt_hidden" not in page and 'value="nope"' in page
    r = b.post("/channels/new/matrix", {"homeserver": "http://matrix.example.org",
                                        "room_id": "!r:example.org", "access_token": "syt_hidden",
                                        "events": ["deploy.failed"]}, referer="/channels")
    assert r.status_code == 422 and "https" in _field_error(_text(r), "matrix-homeserver")
    r = b.post("/channels/new/email", {"to": "ops@example.com"}, referer="/channels")
    assert r.status_code == 422 and _field_error(_text(r), "email-events")
    r = b.post("/channels/new/email", {"to": "ops@example.com, cto@example.com",
                                       "events": ["backup.failed"]})
    assert r.status_code == 303
    assert Webhook.get(Webhook.channel == "email").options == {
        "to": ["ops@example.com", "cto@example.com"]}


def test_a_paused_channel_needs_attention_on_the_overview(world, member):  # noqa: F811
    org, b = member
    channel = Webhook.create(organization=org, channel="ntfy", url="https://ntfy.sh/ops",
                             options={"server": "https://ntfy.sh", "topic": "ops"},
                             events=["deploy.failed"], secret_encrypted="sealed",
                             is_active=False, failure_count=10)
    page = _text(b.get("/"))
    assert f'href="/channels/{channel.id}">Notifications</a>' in page
    assert "the ntfy channel to https://ntfy.sh/ops is paused after 10 failed deliveries" in page
