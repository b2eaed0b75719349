"""E-mail notification channels: an event as a short e-mail (text and HTML), sent
through the control plane's SMTP server (settings SMTP_*, infra/config.py).

`send` never raises for mail problems: it returns a SendResult as the HTTP
sender does, whose status is the SMTP server's reply code (250 when it took the
message)."""

import html
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import make_msgid

from control_plane.services.webhooks import channel_types, payloads
from control_plane.services.webhooks.net import SendResult


def configured(settings):
    return bool(settings.get("SMTP_HOST"))


def message(envelope, to, settings):
    msg = EmailMessage()
    msg["Subject"] = f"[Berth] {payloads.summary(envelope)}"
    msg["From"] = settings["SMTP_FROM"]
    msg["To"] = ", ".join(to)
    # The event's id, so a mail client threads nothing together and a reader can
    # find the event; the same on every attempt.
    msg["Message-ID"] = make_msgid(idstring=envelope["event_id"], domain="berth")
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies
    msg.set_content("\n".join([payloads.title(envelope), "", *channel_types.lines(envelope)]))
    rows = "".join(f"<tr><th align=left>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>"
                   for label, text in payloads.facts(envelope))
    colour = {"success": payloads.GREEN, "failure": payloads.RED}.get(
        payloads.tone(envelope), payloads.GREY)
    msg.add_alternative(
        f"<!doctype html><html><body style=\"font-family:sans-serif\">"
        f"<h2 style=\"border-left:6px solid {colour};padding-left:8px\">"
        f"{html.escape(payloads.title(envelope))}</h2>"
        f"<p>{html.escape(payloads.summary(envelope))}</p><table>{rows}</table>"
        f"<p style=\"color:#666\">Event {html.escape(envelope['event_id'])} · "
        f"{html.escape(envelope['timestamp'])}</p></body></html>", subtype="html")
    return msg


def _context(settings):
    ca = settings.get("SMTP_CA_BUNDLE")
    return ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()


def send(msg, settings, timeout):
    started = time.monotonic()

    def result(ok, code, error=None):
        return SendResult(ok, code, int((time.monotonic() - started) * 1000), None, error)

    if not configured(settings):
        return result(False, None, "no SMTP server is configured (CP_SMTP_HOST)")
    host, port, security = settings["SMTP_HOST"], int(settings["SMTP_PORT"]), settings[
        "SMTP_SECURITY"]
    try:
        if security == "tls":
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=_context(settings))
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            if security == "starttls":
                smtp.starttls(context=_context(settings))
            if settings.get("SMTP_USERNAME"):
                smtp.login(settings["SMTP_USERNAME"], settings.get("SMTP_PASSWORD") or "")
            refused = smtp.send_message(msg)
    except smtplib.SMTPResponseException as exc:  # the server said no
        return result(False, exc.smtp_code, f"SMTP {exc.smtp_code}: "
                      f"{exc.smtp_error.decode('utf-8', 'replace')[:200]}")
    except smtplib.SMTPRecipientsRefused as exc:
        return result(False, None, f"every recipient was refused: {', '.join(exc.recipients)}")
    except (OSError, smtplib.SMTPException) as exc:  # connection, TLS, timeout
        return result(False, None, f"SMTP failed: {type(exc).__name__}: {exc}"[:300])
    # Some recipients refused: the others have it, and a retry would send it to them
    # again; the refusal is kept in the delivery's answer.
    snippet = f"refused recipients: {', '.join(sorted(refused))}" if refused else None
    return SendResult(True, 250, int((time.monotonic() - started) * 1000), snippet, None)
