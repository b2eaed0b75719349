"""The agent's mail catcher, a real SMTP server on loopback: an environment signs in
as itself and its mails are kept for it alone, read back whole through the live
request the control plane sends; nothing is taken without the right password, and
the store keeps its bounds."""

import json
import smtplib
import uuid
from email.message import EmailMessage
from types import SimpleNamespace

import pytest

from agent import live
from agent.mail import catcher as catcher_mod
from agent.mail import erp_settings, store
from protocol.v1 import agent_pb2 as pb


@pytest.fixture
def catcher(tmp_path):
    c = catcher_mod.Catcher(tmp_path, "127.0.0.1").start()
    yield c
    c.stop()


def message(subject="Invoice INV/2026/0001", attach=True):
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "shop@example.com", "customer@example.org", subject
    msg.set_content("Dear customer, your invoice is attached.")
    msg.add_alternative("<p>Dear customer, your <b>invoice</b> is attached.</p>", subtype="html")
    if attach:
        msg.add_attachment(b"%PDF-1.4 " + b"x" * 1000, maintype="application", subtype="pdf",
                           filename="INV_2026_0001.pdf")
    return msg


def send(c, env_id, msg, password=None):
    user, right = c.credentials(env_id)
    with smtplib.SMTP(c.host, c.port, timeout=5) as smtp:
        smtp.login(user, password or right)
        smtp.send_message(msg)


def ask(agent, env_id, **fields):
    reply = live.reply_to(agent, pb.LiveRequest(correlation_id="c", mails=pb.MailsRequest(
        environment_id=str(env_id), **fields)))
    return reply, json.loads(reply.mails.mails_json or "{}")


def test_a_mail_is_kept_for_its_environment_and_read_back_whole(catcher, tmp_path):
    env, other = uuid.uuid4(), uuid.uuid4()
    send(catcher, env, message())
    agent = SimpleNamespace(mail_catcher=lambda: catcher, over_ssh=False, data_dir=tmp_path)
    reply, found = ask(agent, env, limit=10)
    assert reply.error_code == ""
    (summary,) = found["mails"]
    assert (summary["from"], summary["to"], summary["subject"]) == (
        "shop@example.com", "customer@example.org", "Invoice INV/2026/0001")
    assert summary["has_html"] is True
    assert summary["attachments"] == [{"name": "INV_2026_0001.pdf", "size": 1009}]
    _, whole = ask(agent, env, mail_id=summary["id"])
    mail = whole["mail"]
    assert mail["text"].startswith("Dear customer") and "<b>invoice</b>" in mail["html"]
    assert ["Subject", "Invoice INV/2026/0001"] in mail["headers"]
    assert ask(agent, other, limit=10)[1] == {"mails": []}  # another environment's: none
    assert ask(agent, other, mail_id=summary["id"])[1] == {"mail": None}
    assert ask(agent, env, mail_id="../../etc/passwd")[1] == {"mail": None}
    # The catcher's port is kept for the next start: ERPs are configured with it.
    assert json.loads((tmp_path / "mail.json").read_text())["port"] == catcher.port
    settings = erp_settings(agent, env)
    assert settings["host"] == "host.docker.internal" and settings["port"] == catcher.port
    assert (settings["user"], settings["password"]) == catcher.credentials(env)


def test_nothing_is_taken_without_the_environments_own_password(catcher):
    env, other = uuid.uuid4(), uuid.uuid4()
    with pytest.raises(smtplib.SMTPAuthenticationError):
        send(catcher, env, message(), password=catcher.credentials(other)[1])
    with smtplib.SMTP(catcher.host, catcher.port, timeout=5) as smtp:
        with pytest.raises(smtplib.SMTPSenderRefused):  # AUTH is required first
            smtp.send_message(message())
        with pytest.raises(smtplib.SMTPAuthenticationError):
            smtp.login("not-an-environment", catcher.credentials("not-an-environment")[1])
    assert catcher.store.list(env) == []


def test_a_server_over_ssh_has_no_catcher(tmp_path):
    reply, _ = ask(SimpleNamespace(over_ssh=True, data_dir=tmp_path), uuid.uuid4(), limit=1)
    assert reply.error_code == "no_mail_catcher"


def test_a_mail_its_reader_cannot_decode_is_shown_as_such_and_parts_are_capped(catcher,
                                                                               tmp_path):
    env = uuid.uuid4()
    agent = SimpleNamespace(over_ssh=False, data_dir=tmp_path)
    with smtplib.SMTP(catcher.host, catcher.port, timeout=5) as smtp:
        smtp.login(*catcher.credentials(env))
        smtp.sendmail("a@example.com", ["b@example.com"],
                      b"Subject: odd\r\nContent-Type: text/plain; charset=x-no-such\r\n\r\n"
                      b"caf\xc3\xa9\r\n")
        big = EmailMessage()
        big["Subject"], big["From"], big["To"] = "long", "a@example.com", "b@example.com"
        big.set_content("\u00e9" * (store.MAX_PART_BYTES))  # twice the cap in UTF-8
        smtp.send_message(big)
    long_mail, odd = ask(agent, env, limit=10)[1]["mails"]
    assert odd["subject"] == "odd"
    assert ask(agent, env, mail_id=odd["id"])[1]["mail"]["text"].startswith("café")
    whole = ask(agent, env, mail_id=long_mail["id"])[1]["mail"]
    assert whole["truncated"] is True
    assert len(whole["text"].encode()) <= store.MAX_PART_BYTES


def test_the_store_keeps_its_bounds_and_forgets_an_environment(catcher, monkeypatch):
    env = uuid.uuid4()
    monkeypatch.setattr(store, "MAX_MAILS", 3)
    for i in range(5):
        send(catcher, env, message(subject=f"mail {i}", attach=False))
    assert [m["subject"] for m in catcher.store.list(env)] == ["mail 4", "mail 3", "mail 2"]
    catcher.store.forget(env)
    assert catcher.store.list(env) == []
    with smtplib.SMTP(catcher.host, catcher.port, timeout=5) as smtp:
        smtp.login(*catcher.credentials(env))
        big = EmailMessage()
        big["Subject"] = "too big"
        big.set_content("x" * (store.MAX_MAIL_BYTES + 10))
        with pytest.raises(smtplib.SMTPException):
            smtp.send_message(big)
    assert catcher.store.list(env) == []
