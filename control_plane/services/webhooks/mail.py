"""E-mail notification channels: an event as a short e-mail (text and HTML), sent
through the control plane's SMTP server (settings SMTP_*, infra/config.py).

`send` never raises for mail problems: it returns a SendResult as the HTTP
sender does, whose status is the SMTP server's reply code (250 when it took the
message)."""

import html
import logging
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import make_msgid

from control_plane.services.webhooks import channel_types, payloads
from control_plane.services.webhooks.net import SendResult

log = logging.getLogger("berth.webhooks")


def configured(settings):
    return bool(settings.get("SMTP_HOST"))


def message(envelope, to, settings):
    msg = EmailMessage()
    # One line: a name may hold a line break, which a header may not.
    msg["Subject"] = " ".join(f"[Berth] {payloads.summary(envelope)}".split())
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
    """Within `timeout` in all: each step of the exchange waits at most the time left
    (smtplib's own timeout is per step). What the server or the network said is
    logged; the delivery keeps a reason that names no part of the operator's setup."""
    started = time.monotonic()
    deadline = started + timeout

    def result(ok, code, error=None, snippet=None):
        return SendResult(ok, code, int((time.monotonic() - started) * 1000), snippet, error)

    def left(smtp=None):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer within {timeout:g} s")
        if smtp is not None and smtp.sock is not None:
            smtp.sock.settimeout(remaining)
        return remaining

    if not configured(settings):
        return result(False, None, "no SMTP server is configured (CP_SMTP_HOST)")
    host, port = settings["SMTP_HOST"], int(settings["SMTP_PORT"])
    security = settings["SMTP_SECURITY"]
    try:
        if security == "tls":
            smtp = smtplib.SMTP_SSL(host, port, timeout=left(), context=_context(settings))
        else:
            smtp = smtplib.SMTP(host, port, timeout=left())
        with smtp:
            if security == "starttls":
                left(smtp)
                smtp.starttls(context=_context(settings))
            if settings.get("SMTP_USERNAME"):
                left(smtp)
                smtp.login(settings["SMTP_USERNAME"], settings.get("SMTP_PASSWORD") or "")
            left(smtp)
            refused = smtp.send_message(msg)
    except smtplib.SMTPResponseException as exc:  # the server said no
        log.warning("SMTP %s refused a notification: %s", exc.smtp_code,
                    exc.smtp_error.decode("utf-8", "replace")[:300])
        return result(False, exc.smtp_code, f"the SMTP server refused it (SMTP {exc.smtp_code})")
    except smtplib.SMTPRecipientsRefused as exc:
        return result(False, None, f"every recipient was refused: {', '.join(exc.recipients)}")
    except (OSError, smtplib.SMTPException) as exc:  # connection, TLS, timeout
        log.warning("the SMTP server could not take a notification: %s", exc)
        return result(False, None, f"the SMTP server could not be reached or spoken to "
                                   f"({type(exc).__name__})")
    # Some recipients refused: the others have it, and a retry would send it to them
    # again; the refusal is kept in the delivery's answer.
    snippet = f"refused recipients: {', '.join(sorted(refused))}" if refused else None
    return result(True, 250, snippet=snippet)
