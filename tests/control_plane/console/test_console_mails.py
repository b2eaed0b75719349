"""The console's caught mails, on both databases: production has none and says so, an
agent that cannot be reached is a message on the page (never a 500), the environment
page links the mails only outside production, and a mail's HTML part is shown only in
an empty sandbox, escaped into its srcdoc."""

import datetime as dt
import html

from control_plane.console import mails as console_mails
from control_plane.models import Environment
from tests.control_plane.console.test_console_pages import _text, member  # noqa: F401

LINK = "Mails (caught, never sent)"


def _production(env):
    Environment.update(environment_type="production").where(Environment.id == env.id).execute()


def test_production_has_no_caught_mail_and_an_unreachable_agent_is_said(world, member):  # noqa: F811
    org, b = member
    project = world.project(org)
    prod, staging = world.environment(project), world.environment(project)
    _production(prod)
    r = b.get(f"/environments/{prod.id}/mails")
    assert r.status_code == 200 and 'role="alert"' in _text(r)
    assert "A production environment sends its mail out: none is caught." in _text(r)
    assert LINK not in _text(b.get(f"/environments/{prod.id}"))

    page = _text(b.get(f"/environments/{staging.id}"))
    assert f'href="/environments/{staging.id}/mails">{LINK}</a>' in page
    r = b.get(f"/environments/{staging.id}/mails")  # its server has no agent connected
    assert r.status_code == 200 and "agent could not be reached." in _text(r)
    r = b.get(f"/environments/{staging.id}/mails/some-mail")
    assert r.status_code == 200 and "agent could not be reached." in _text(r)


def test_a_mail_is_shown_with_its_html_only_in_an_empty_sandbox(world, member, monkeypatch):  # noqa: F811
    org, b = member
    env = world.environment(world.project(org))
    summary = {"id": "m1", "received_at": dt.datetime(2026, 1, 2, 3, 4, 5), "from": "erp@shop",
               "to": "client@example.com", "subject": "Invoice INV/1", "has_html": True,
               "attachments": [{"name": "INV_1.pdf", "size": 2048}]}
    mail = {**summary, "environment_id": env.id, "text": "Dear client,\nyour invoice.",
            "headers": [{"name": "Subject", "value": "Invoice INV/1"}],
            "html": '<p onclick="x()">Dear</p><script>alert(1)</script><img src="https://t.example/p">'}
    # Stand-ins for the live read through the agent (a real catcher: tests/agent/).
    monkeypatch.setattr(console_mails, "list_mails",
                        lambda *a: {"environment_id": env.id, "mails": [summary]})
    monkeypatch.setattr(console_mails, "get_mail", lambda *a: mail)

    listed = _text(b.get(f"/environments/{env.id}/mails"))
    assert f'<a href="/environments/{env.id}/mails/m1">Invoice INV/1</a>' in listed
    assert "2026-01-02 03:04:05 UTC" in listed and "client@example.com" in listed

    page = _text(b.get(f"/environments/{env.id}/mails/m1"))
    assert "<pre tabindex=\"0\">Dear client,\nyour invoice.</pre>" in page
    assert "INV_1.pdf (2.0 KiB)" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    (frame,) = [t for t in page.split("<iframe")[1:]]
    assert frame.startswith(' sandbox="" srcdoc="') and 'title="' in frame.split(">")[0]
    srcdoc = html.unescape(frame.split('srcdoc="')[1].split('"')[0])
    assert srcdoc == console_mails.FRAME_CSP + mail["html"]
    assert "default-src 'none'" in srcdoc
