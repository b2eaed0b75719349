"""The SMTP server non-production ERPs send their mail to (aiosmtpd, on a thread of
its own): it listens on the Docker bridge's gateway address, which containers reach
as `host.docker.internal` (the engine's `host-gateway`), and never on a public one.

Each environment signs in (AUTH PLAIN or LOGIN) as its own id with a password
derived from this server's mail key, so a mail is kept for the environment that
sent it and no container can drop mail into another's. Nothing is sent on: a
mail's recipients only say where it would have gone.

The port is chosen once and kept (`<data>/mail.json`): ERPs are configured with it
at deploy, so it must outlive the agent's restarts."""

import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from agent.mail import PORT_FILE, kept_port
from agent.mail.store import MAX_MAIL_BYTES, MailStore, is_environment_id

log = logging.getLogger("berth.agent")
# Sign-in without TLS is the point here: the address is the bridge's own, which never
# leaves this host, and the password only tells environments apart.
warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS", UserWarning)
# aiosmtpd logs each connection, and warns of its own deprecated attribute at every
# sign-in (it sets it itself; we read auth_data): the catcher logs what it keeps.
logging.getLogger("mail.log").setLevel(logging.ERROR)


class Catcher:
    """`start()` it; `credentials(env_id)` is what an ERP signs in with."""

    def __init__(self, data_dir, host, port=None):
        self.data_dir = data_dir
        self.store = MailStore(data_dir / "mails")
        self.host = host
        self.port = port or _kept_port(data_dir, host)
        self._key = _key(data_dir)
        self._controller = None

    def credentials(self, env_id):
        """(user, password) of an environment's ERP."""
        env_id = str(env_id)
        return env_id, hmac.new(self._key, env_id.encode(), hashlib.sha256).hexdigest()

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        user = (getattr(auth_data, "login", None) or b"").decode("utf-8", "replace")
        given = (getattr(auth_data, "password", None) or b"").decode("utf-8", "replace")
        ok = is_environment_id(user) and hmac.compare_digest(given, self.credentials(user)[1])
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        env_id = session.auth_data.login.decode()  # who signed in (_authenticate)
        mail_id = self.store.save(env_id, envelope.original_content or envelope.content)
        log.info("caught mail %s of environment %s", mail_id, env_id)
        return "250 Caught (not sent on)"

    def start(self):
        self._controller = Controller(
            self, hostname=self.host, port=self.port, auth_required=True,
            auth_require_tls=False,  # the bridge's own address: never leaves this host
            authenticator=self._authenticate, data_size_limit=MAX_MAIL_BYTES,
            server_hostname="berth-mail-catcher")
        self._controller.start()
        _keep_port(self.data_dir, self.host, self.port)
        log.info("mail catcher listening on %s:%s", self.host, self.port)
        return self

    def stop(self):
        if self._controller is not None:
            self._controller.stop()


def bridge_gateway(interface="docker0"):
    """The address containers reach as `host-gateway`: the default bridge's own."""
    import psutil

    for address in psutil.net_if_addrs().get(interface, ()):
        if address.family == socket.AF_INET:
            return address.address
    raise OSError(f"no {interface} bridge: is the container engine running?")


def _key(data_dir):
    path = data_dir / "mail.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    return path.read_bytes()


def _kept_port(data_dir, host):
    """The port this server's catcher had, while it is still free; else a free one
    (aiosmtpd's controller cannot be given port 0). Probed as the server binds
    (SO_REUSEADDR): connections closed a moment ago do not hold the port."""
    kept = kept_port(data_dir)
    for port in (kept, 0) if kept else (0,):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                continue
            chosen = s.getsockname()[1]
        if kept and chosen != kept:
            log.warning("the mail catcher's port %s is taken: it listens on %s now, and "
                        "ERPs configured with the old one send nothing until redeployed",
                        kept, chosen)
        return chosen
    raise OSError(f"no port free on {host}")


def _keep_port(data_dir, host, port):
    (data_dir / PORT_FILE).write_text(json.dumps({"host": host, "port": port}))
