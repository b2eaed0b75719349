"""The ERP stand-in sends mail through the server Odoo would choose: the first active
ir_mail_server by sequence, else the options' smtp_* (a command-line flag over the
config file); after `odoo neutralize`, nowhere until the dummy server is pointed
somewhere. The stand-in runs as a plain process (the tests' python, which has psycopg2
as the image's python3 has) against the tests' PostgreSQL."""

import base64
import email
import email.policy
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg2
import pytest
from aiosmtpd.controller import Controller

from tests.support.services import free_port, stop_process
from tests.support.smtp_receiver import smtp_receiver  # noqa: F401 (a fixture)
from tests.support.waiting import wait_for

SCRIPT = Path(__file__).parents[2] / "images" / "erp" / "odoo-stand-in"
DB = "stand_in_mail"


class Inbox:
    """A plain SMTP server (no TLS, no AUTH): the messages it took, in order."""

    def __init__(self):
        self.messages = []
        self.controller = Controller(self, hostname="127.0.0.1", port=free_port())
        self.controller.start()
        self.port = self.controller.port

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        self.messages.append(email.message_from_bytes(envelope.content,
                                                      policy=email.policy.default))
        return "250 OK"


@pytest.fixture(scope="module")
def erp(postgres, tmp_path_factory):
    """The stand-in: its config file names an SMTP port nothing listens on, and the
    command line the inbox's, which wins."""
    inbox, files = Inbox(), tmp_path_factory.mktemp("erp-mail")
    conf, http_port = files / "odoo.conf", free_port()
    conf.write_text(f"[options]\ndb_host = 127.0.0.1\ndb_port = {postgres.port}\n"
                    f"db_user = berth\ndb_name = {DB}\ndata_dir = {files / 'data'}\n"
                    f"http_port = {http_port}\nsmtp_server = 127.0.0.1\n"
                    f"smtp_port = {free_port()}\n")
    log = open(files / "odoo.log", "w")  # noqa: SIM115 - closed by stop_process
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "-c", str(conf), "--smtp-port",
                             str(inbox.port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        def listening():
            assert proc.poll() is None, (files / "odoo.log").read_text()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", http_port)) == 0

        wait_for(listening, what="the stand-in's HTTP port", timeout=30,
                 detail=(files / "odoo.log").read_text)
        conn = psycopg2.connect(postgres.url(DB))
        conn.autocommit = True
        yield {"url": f"http://127.0.0.1:{http_port}", "conf": conf, "inbox": inbox,
               "cr": conn.cursor()}
        conn.close()
    finally:
        stop_process(proc, log)
        inbox.controller.stop()


@pytest.fixture(autouse=True)
def no_mail_servers(erp):
    erp["cr"].execute("DELETE FROM ir_mail_server")
    erp["inbox"].messages.clear()


def send(erp, **extra):
    body = json.dumps({"to": ["someone@example.com"], "subject": "Hello", "body": "Hi.",
                       **extra}).encode()
    req = urllib.request.Request(erp["url"] + "/berth/send-mail", body,
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_without_a_mail_server_the_options_smtp_server_is_used(erp):
    assert send(erp, subject="By config") == (
        200, {"sent": True, "server": f"127.0.0.1:{erp['inbox'].port}", "via": "config"})
    [msg] = erp["inbox"].messages
    assert (msg["Subject"], msg["To"], msg["From"]) == (
        "By config", "someone@example.com", f"odoo@{DB}.example")
    erp["cr"].execute("SELECT email_from FROM mail_message WHERE subject = 'By config'")
    assert erp["cr"].fetchall() == [(f"odoo@{DB}.example",)]


def test_the_first_active_mail_server_by_sequence_wins(erp, smtp_receiver):  # noqa: F811
    erp["cr"].execute(
        "INSERT INTO ir_mail_server (name, smtp_host, smtp_port, sequence, active,"
        " smtp_user, smtp_pass, smtp_encryption) VALUES"
        " ('off', 'invalid', 25, 1, false, NULL, NULL, 'none'),"
        " ('later', 'invalid', 25, 20, true, NULL, NULL, 'none'),"
        " ('first', %s, %s, 5, true, %s, %s, 'starttls')",
        (smtp_receiver.host, smtp_receiver.port, smtp_receiver.user, smtp_receiver.password))
    assert send(erp, subject="By row") == (200, {
        "sent": True, "server": f"{smtp_receiver.host}:{smtp_receiver.port}",
        "via": "ir_mail_server"})
    assert [m["Subject"] for m in smtp_receiver.messages] == ["By row"]
    assert erp["inbox"].messages == []


def test_a_neutralized_copy_sends_nowhere_until_its_dummy_server_is_pointed(erp):
    subprocess.run([sys.executable, str(SCRIPT), "neutralize", "-c", str(erp["conf"]), "-d", DB],
                   check=True, capture_output=True, timeout=60)
    started = time.monotonic()
    status, answer = send(erp)
    assert (status, answer["sent"]) == (502, False) and time.monotonic() - started < 15
    assert erp["inbox"].messages == []

    erp["cr"].execute("UPDATE ir_mail_server SET smtp_host = '127.0.0.1', smtp_port = %s"
                      " WHERE name = 'neutralization - disable emails'", (erp["inbox"].port,))
    pdf = b"%PDF-1.4 not much"
    assert send(erp, subject="Invoice", body="See attached.", html="<p>See <b>attached</b>.</p>",
                attachments=[{"name": "invoice.pdf",
                              "content_base64": base64.b64encode(pdf).decode()}]) == (
        200, {"sent": True, "server": f"127.0.0.1:{erp['inbox'].port}",
              "via": "ir_mail_server"})
    [msg] = erp["inbox"].messages
    assert msg["Subject"] == "Invoice"
    assert msg.get_body(("plain",)).get_content().strip() == "See attached."
    assert "<b>attached</b>" in msg.get_body(("html",)).get_content()
    [attachment] = msg.iter_attachments()
    assert (attachment.get_filename(), attachment.get_content()) == ("invoice.pdf", pdf)
