"""Notification channels through the public API, on both database backends: their
fields and secrets, refusals that change nothing, scope, limits, and the test
message of every type against real receivers on loopback (an HTTPS stub for the
chat services, an SMTP server with STARTTLS and AUTH for e-mail)."""

import json

import pytest

from control_plane.models import AuditEvent, Webhook
from tests.conftest import auth
from tests.control_plane.webhooks.test_delivery import (  # noqa: F401 - fixtures
    receiver,
    settings,
)
from tests.support.smtp_receiver import smtp_receiver  # noqa: F401 - fixture
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

P = "/api/public/v1"
C = f"{P}/notification-channels"
FIELDS = {"id", "type", "destination", "settings", "events", "description", "project_id",
          "is_active", "last_triggered_at", "failure_count", "created_at"}
TOKEN = "123456789:AAE-abcdefghijklmnopqrstuvwxyz_0123"


@pytest.fixture
def org(world):
    return world.org()


@pytest.fixture
def key(world, org):
    """A fresh full-access key per call (each makes 10 channel changes a minute)."""
    return lambda: world.key(org)[0]


@pytest.fixture
def smtp(smtp_receiver, settings):  # noqa: F811
    settings.update(smtp_receiver.settings())
    return smtp_receiver


def create(client, raw, kind, given, events=("server.unreachable",), **body):
    return client.post(C, headers=auth(raw), json={"type": kind, "settings": given,
                                                   "events": list(events), **body})


def chat_settings(kind, url):
    """Settings of each HTTP type that send to `url` (a receiver on loopback)."""
    return {"slack": {"url": url + "/slack/T1/B2/secretpath"},
            "discord": {"url": url + "/discord/api/webhooks/1/secretpath"},
            "teams": {"url": url + "/teams/webhookb2/secretpath"},
            "telegram": {"bot_token": TOKEN, "chat_id": "-100200300", "api_url": url},
            "matrix": {"homeserver": url, "room_id": "!room:example.org",
                       "access_token": "syt_secret_token"},
            "ntfy": {"server": url, "topic": "berth-alerts", "token": "tk_secretntfy"}}[kind]


SECRETS = ("secretpath", TOKEN, "syt_secret_token", "tk_secretntfy", "mail-pass-1")


def assert_no_secret(text):
    for secret in SECRETS:
        assert secret not in text, secret


def test_a_channel_is_made_read_changed_and_deleted_without_showing_its_secret(
        client, key, org, receiver):  # noqa: F811
    raw = key()
    r = create(client, raw, "slack", chat_settings("slack", receiver.url),
               events=["server.unreachable", "deploy.failed", "deployment.completed"],
               description="Ops room")
    assert r.status_code == 201, r.json
    made = r.json
    assert set(made) == FIELDS
    assert made["type"] == "slack" and made["settings"] == {}
    assert made["destination"] == f"{receiver.url}/…"
    assert made["events"] == ["server.unreachable", "deploy.failed", "deploy.completed"]
    assert (made["is_active"], made["failure_count"], made["project_id"]) == (True, 0, None)
    assert client.get(f"{C}/{made['id']}", headers=auth(raw)).json == made
    page = client.get(C, headers=auth(raw)).json
    assert [c["id"] for c in page["items"]] == [made["id"]] and page["total"] == 1
    # A channel is not a webhook, and the other way round.
    assert client.get(f"{P}/webhooks", headers=auth(raw)).json["total"] == 0
    assert client.get(f"{P}/webhooks/{made['id']}", headers=auth(raw)).status_code == 404

    r = client.patch(f"{C}/{made['id']}", headers=auth(raw),
                     json={"description": "Night shift", "events": ["backup.failed"]})
    assert r.status_code == 200
    assert (r.json["description"], r.json["events"]) == ("Night shift", ["backup.failed"])
    assert r.json["destination"] == made["destination"]  # the secret URL was kept

    assert client.delete(f"{C}/{made['id']}", headers=auth(raw)).status_code == 204
    assert client.get(f"{C}/{made['id']}", headers=auth(raw)).status_code == 404
    actions = [e.action for e in AuditEvent.select().order_by(AuditEvent.created_at)]
    assert [a for a in actions if a.startswith("channel.")] == [
        "channel.create", "channel.update", "channel.delete"]
    stored = Webhook.select()  # deleted: nothing left, and nothing in clear before
    assert not list(stored)
    audit = json.dumps([e.changes for e in AuditEvent.select()], default=str)
    assert_no_secret(audit)


def test_settings_are_merged_and_a_secret_left_out_is_kept(
        client, key, receiver, settings):  # noqa: F811
    raw = key()
    made = create(client, raw, "telegram", chat_settings("telegram", receiver.url)).json
    assert made["settings"] == {"chat_id": "-100200300", "api_url": receiver.url}
    r = client.patch(f"{C}/{made['id']}", headers=auth(raw),
                     json={"settings": {"chat_id": "@berth_ops"}})
    assert r.status_code == 200 and r.json["settings"]["chat_id"] == "@berth_ops"
    assert client.post(f"{C}/{made['id']}/test", headers=auth(raw)).json["success"] is True
    (got,) = receiver.wait_for(1)
    assert got.path == f"/bot{TOKEN}/sendMessage"  # the stored token, still used
    assert json.loads(got.body)["chat_id"] == "@berth_ops"
    update = AuditEvent.get(AuditEvent.action == "channel.update")
    assert update.changes["sealed_replaced"] == []
    r = client.patch(f"{C}/{made['id']}", headers=auth(raw),
                     json={"settings": {"bot_token": "42:" + "b" * 30}})
    assert r.status_code == 200
    # Its address moved without its token: refused, or the token would follow it.
    r = client.patch(f"{C}/{made['id']}", headers=auth(raw),
                     json={"settings": {"api_url": "https://bots.example.net"}})
    assert r.status_code == 422 and "bot_token" in r.json["details"]["json"]["settings"]
    assert client.get(f"{C}/{made['id']}", headers=auth(raw)).json["settings"][
        "api_url"] == receiver.url
    last = AuditEvent.select().where(AuditEvent.action == "channel.update").order_by(
        AuditEvent.created_at.desc()).first()
    assert last.changes["sealed_replaced"] == ["bot_token"]
    assert_no_secret(json.dumps([e.changes for e in AuditEvent.select()], default=str))


@pytest.mark.parametrize("kind, settings_, field", [
    ("slack", {"url": "http://hooks.example.com/x"}, "url"),
    ("slack", {}, "url"),
    ("slack", {"url": "https://hooks.example.com/x", "colour": "red"}, "colour"),
    ("telegram", {"bot_token": "not-a-token", "chat_id": "1"}, "bot_token"),
    ("telegram", {"bot_token": TOKEN, "chat_id": "general"}, "chat_id"),
    ("matrix", {"homeserver": "https://m.example.org", "room_id": "room",
                "access_token": "t"}, "room_id"),
    ("matrix", {"homeserver": "https://m.example.org", "room_id": "#ops:example.org",
                "access_token": "t"}, "room_id"),  # an alias: sending needs the room's id
    ("ntfy", {"topic": "no spaces"}, "topic"),
    ("ntfy", {"topic": "ok", "server": "https://10.0.0.1"}, "server"),
    ("email", {"to": ["not-an-address"]}, "to"),
    ("email", {"to": []}, "to"),
])
def test_bad_settings_are_refused_by_name_and_nothing_is_made(client, key, kind, settings_,
                                                               field, smtp_receiver, app):  # noqa: F811
    app.extensions["berth"].settings.update(smtp_receiver.settings())
    r = create(client, key(), kind, settings_)
    assert r.status_code == 422, r.json
    assert r.json["error"] == "validation_error"
    assert field in r.json["details"]["json"]["settings"], r.json
    assert Webhook.select().count() == 0


def test_bad_requests_are_refused_and_change_nothing(client, key, org, world):
    raw = key()
    for body in ({"type": "pager", "settings": {}, "events": ["deploy.failed"]},
                 {"type": "ntfy", "settings": {"topic": "t"}, "events": []},
                 {"type": "ntfy", "settings": {"topic": "t"}, "events": ["nope"]},
                 {"type": "ntfy", "settings": {"topic": "t"},
                  "events": ["deploy.failed", "deployment.failed"]},
                 {"type": "ntfy", "settings": "topic=t", "events": ["deploy.failed"]}):
        r = client.post(C, headers=auth(raw), json=body)
        assert r.status_code == 422 and r.json["error"] == "validation_error", (body, r.json)
    # E-mail without an SMTP server configured: said on `type`.
    r = create(client, raw, "email", {"to": ["ops@example.com"]})
    assert r.status_code == 422 and "CP_SMTP_HOST" in r.json["message"]
    assert Webhook.select().count() == 0
    ro = world.key(org, "read_only")[0]
    assert create(client, ro, "ntfy", {"topic": "t"}).status_code == 403
    assert client.get(C, headers=auth(ro)).status_code == 200


def test_channels_count_apart_from_webhooks_and_project_keys_see_their_own(client, org, world):
    project, other = world.project(org), world.project(org)
    scoped = world.key(org, scope="project", project=project)[0]
    r = create(client, scoped, "ntfy", {"topic": "mine"})
    assert r.status_code == 201 and r.json["project_id"] == str(project.id)
    full = world.key(org)[0]
    theirs = create(client, full, "ntfy", {"topic": "theirs"}, project_id=str(other.id)).json
    assert [c["settings"]["topic"] for c in client.get(C, headers=auth(scoped)).json["items"]] \
        == ["mine"]
    assert client.get(f"{C}/{theirs['id']}", headers=auth(scoped)).status_code == 404
    assert create(client, scoped, "ntfy", {"topic": "org"}, project_id=None).status_code == 403


@pytest.mark.parametrize("kind", ["slack", "discord", "teams", "telegram", "matrix", "ntfy"])
def test_the_test_message_reaches_each_chat_service_in_its_own_format(
        client, key, receiver, kind):  # noqa: F811
    raw = key()
    made = create(client, raw, kind, chat_settings(kind, receiver.url)).json
    r = client.post(f"{C}/{made['id']}/test", headers=auth(raw))
    assert r.status_code == 200 and r.json["success"] is True, r.json
    assert r.json["status_code"] == 200 and r.json["message"] is None
    (got,) = receiver.wait_for(1)
    body = json.loads(got.body)
    text = json.dumps(body)
    assert "Test message from Berth" in text
    assert got.headers["Content-Type"] == "application/json"
    if kind == "slack":
        assert got.path == "/slack/T1/B2/secretpath" and body["attachments"][0]["blocks"]
    elif kind == "discord":
        assert body["embeds"][0]["title"] == "ping"
    elif kind == "teams":
        assert body["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive"
    elif kind == "telegram":
        assert got.path == f"/bot{TOKEN}/sendMessage"
        assert (body["chat_id"], body["parse_mode"]) == ("-100200300", "HTML")
        assert body["text"].startswith("<b>ping</b>")
    elif kind == "matrix":
        assert got.method == "PUT"
        assert got.path.startswith("/_matrix/client/v3/rooms/%21room%3Aexample.org/send/"
                                   "m.room.message/berth-")
        assert got.headers["Authorization"] == "Bearer syt_secret_token"
        assert body["msgtype"] == "m.notice" and body["format"] == "org.matrix.custom.html"
    else:
        assert got.headers["Authorization"] == "Bearer tk_secretntfy"
        assert (body["topic"], body["title"], body["priority"]) == ("berth-alerts", "Test ping", 3)
    assert Webhook.get_by_id(made["id"]).last_triggered_at is None  # no delivery entry
    assert client.get(f"{C}/{made['id']}/deliveries", headers=auth(raw)).json == []
    assert_no_secret(json.dumps(client.get(C, headers=auth(raw)).json))


def test_a_failing_receiver_is_reported_by_the_test(client, key, receiver):  # noqa: F811
    raw = key()
    made = create(client, raw, "ntfy", chat_settings("ntfy", receiver.url)).json
    receiver.respond(403)
    r = client.post(f"{C}/{made['id']}/test", headers=auth(raw)).json
    assert (r["success"], r["status_code"], r["message"]) == (False, 403, "HTTP 403")


def test_the_test_email_goes_through_smtp_with_starttls_and_auth(client, key, smtp):
    raw = key()
    made = create(client, raw, "email", {"to": ["ops@example.com", "cto@example.com"]}).json
    assert made["destination"] == "mailto:ops@example.com,cto@example.com"
    assert made["settings"] == {"to": ["ops@example.com", "cto@example.com"]}
    r = client.post(f"{C}/{made['id']}/test", headers=auth(raw)).json
    assert (r["success"], r["status_code"]) == (True, 250), r
    (msg,) = smtp.wait_for(1)
    assert msg.rcpt_tos == ["ops@example.com", "cto@example.com"]
    assert msg["From"] == "Berth <alerts@berth.test>"
    assert msg["Subject"] == "[Berth] Test ping"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert "Test message from Berth" in msg.get_body(("plain",)).get_content()
    assert "<table>" in msg.get_body(("html",)).get_content()
    smtp.refuse(554)
    r = client.post(f"{C}/{made['id']}/test", headers=auth(raw)).json
    assert (r["success"], r["status_code"]) == (False, 554)
    assert r["message"] == "the SMTP server refused it (SMTP 554)"  # not the server's words
    # Ten long addresses: the destination shown is cut to fit, the list kept whole.
    many = [f"{'x' * 200}{i}@example.com" for i in range(10)]
    made = create(client, raw, "email", {"to": many}).json
    assert made["destination"] == f"mailto:{many[0]} and 9 more"
    assert made["settings"]["to"] == many


def test_a_wrong_smtp_password_is_a_failed_test_not_an_error(client, key, smtp,
                                                              settings):  # noqa: F811
    raw = key()
    made = create(client, raw, "email", {"to": ["ops@example.com"]}).json
    settings["SMTP_PASSWORD"] = "wrong"
    r = client.post(f"{C}/{made['id']}/test", headers=auth(raw))
    assert r.status_code == 200 and r.json["success"] is False
    assert r.json["status_code"] == 535 and "wrong" not in r.json["message"]
