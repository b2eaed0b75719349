"""Outgoing mail as Odoo sends it: a MIME message through smtplib."""

import base64
import mimetypes
import smtplib
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

SMTP_TIMEOUT = 10  # seconds: a mail server that does not answer must not hang the request

def build_mail(s, request):
    """The MIME message of a /berth/send-mail request: text, an HTML alternative,
    attachments. ValueError, KeyError or TypeError when the request is not one."""
    to, subject, body = (request.get(k) for k in ("to", "subject", "body"))
    if not (isinstance(to, list) and to and all(isinstance(a, str) and a for a in to)
            and isinstance(subject, str) and isinstance(body, str)):
        raise ValueError('needs "to" (a list of addresses), "subject" and "body"')
    domain = f"{s['db_name']}.example"
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = f"odoo@{domain}", ", ".join(to), subject
    msg["Date"], msg["Message-Id"] = formatdate(localtime=True), make_msgid(domain=domain)
    msg.set_content(body)
    if request.get("html"):
        msg.add_alternative(request["html"], subtype="html")
    for a in request.get("attachments") or ():
        data = base64.b64decode(a["content_base64"], validate=True)
        mimetype = mimetypes.guess_type(a["name"])[0] or "application/octet-stream"
        maintype, _, subtype = mimetype.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=a["name"])
    return msg


def send_mail(msg, host, port, user, password, encryption):
    """smtplib as Odoo uses it: SSL or STARTTLS as the server asks (certificates not
    verified, as Odoo's default), a login when a user is set. OSError (smtplib's
    errors among them) when the mail could not be handed over."""
    smtp_class = smtplib.SMTP_SSL if encryption == "ssl" else smtplib.SMTP
    with smtp_class(host, port, timeout=SMTP_TIMEOUT) as smtp:
        if encryption == "starttls":
            smtp.starttls()
        if user:
            smtp.login(user, password or "")
        smtp.send_message(msg)
