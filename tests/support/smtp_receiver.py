"""A real SMTP server for tests (aiosmtpd) on loopback: STARTTLS required, with a
certificate of the test CA (webhook_receiver's `trust_ca`), and AUTH with one
user. Fixture `smtp_receiver` (function scope): a running `SmtpReceiver`.

SmtpReceiver:
- `host`, `port`, `user`, `password`; `settings()`: the control plane's SMTP_*
  settings that reach it;
- `messages`: every message taken, as `email.message.EmailMessage` (with its
  envelope's `mail_from` and `rcpt_tos` as attributes), in order;
- `wait_for(n, timeout=5)`: block until `n` arrived; return `messages`;
- `refuse(code)`: answer the next DATA with `code` (e.g. 451) once.
"""

import email
import email.policy
import socket
import ssl
import threading

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from tests.support.webhook_receiver import _ca


def _free_port():
    """aiosmtpd's controller cannot listen on port 0 (it connects to its port to
    check it started): a port the system just handed out and let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler:
    def __init__(self, receiver):
        self.receiver = receiver

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        return self.receiver._take(envelope)


class SmtpReceiver:
    user, password = "berth", "mail-pass-1"

    def __init__(self, ca):
        cert = ca.issue_cert("localhost", "127.0.0.1")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self.messages, self._refusals = [], []
        self._cv = threading.Condition()
        self._controller = Controller(
            _Handler(self), hostname="127.0.0.1", port=_free_port(), tls_context=context,
            require_starttls=True, auth_required=True, auth_require_tls=True,
            authenticator=self._authenticate)
        self._controller.start()
        self.host, self.port = "127.0.0.1", self._controller.port

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = (getattr(auth_data, "login", None) == self.user.encode()
              and getattr(auth_data, "password", None) == self.password.encode())
        return AuthResult(success=ok, handled=False)

    def _take(self, envelope):
        with self._cv:
            if self._refusals:
                return f"{self._refusals.pop(0)} refused for the test"
            msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
            msg.mail_from, msg.rcpt_tos = envelope.mail_from, list(envelope.rcpt_tos)
            self.messages.append(msg)
            self._cv.notify_all()
        return "250 OK"

    def refuse(self, code):
        with self._cv:
            self._refusals.append(code)

    def settings(self):
        return {"SMTP_HOST": self.host, "SMTP_PORT": self.port, "SMTP_SECURITY": "starttls",
                "SMTP_USERNAME": self.user, "SMTP_PASSWORD": self.password,
                "SMTP_FROM": "Berth <alerts@berth.test>", "SMTP_CA_BUNDLE": self.ca_path}

    def wait_for(self, n, timeout=5):
        with self._cv:
            self._cv.wait_for(lambda: len(self.messages) >= n, timeout)
            return list(self.messages)

    def close(self):
        self._controller.stop()


@pytest.fixture
def smtp_receiver():
    ca, ca_path = _ca()
    receiver = SmtpReceiver(ca)
    receiver.ca_path = ca_path
    yield receiver
    receiver.close()
