"""Settings: defaults in one class, overrides from CP_* environment variables,
and a dict passed to the app factory (tests)."""

import math
import os
import secrets
import stat
from pathlib import Path


class Config:
    DATA_DIR = "./data"
    DATABASE_URL = None  # None: SQLite file in DATA_DIR
    REDIS_URL = None  # None: in-process counters
    PUBLIC_URL = "http://127.0.0.1:8000"
    GRPC_PUBLIC_ADDRESS = None  # None: PUBLIC_URL's host and the gateway's port
    GRPC_TLS_CERT = None  # PEM file paths; both set: the gateway speaks TLS
    GRPC_TLS_KEY = None
    # Where backups go: file:///dir (None: DATA_DIR/storage) or s3://bucket/prefix,
    # with S3_ENDPOINT_URL for a store other than AWS (control_plane/storage).
    STORAGE_URL = None
    S3_ENDPOINT_URL = None
    SECRET_KEY = None  # None: generated into DATA_DIR on first start
    APPS_DOMAIN = "apps.localhost"
    # Where custom-domain checks ask (`host`, `host:port`; None: the system's
    # resolvers), and how long each lookup may take, in seconds.
    DNS_RESOLVER = None
    DNS_TIMEOUT = 5.0
    WEBHOOK_ALLOW_PRIVATE = False
    # `berth serve` / `berth web` build a missing or stale agent wheelhouse in the
    # background at start (off: only `berth wheelhouse` builds it).
    WHEELHOUSE_AUTO_BUILD = True
    # Where the agent wheelhouse lives (None: DATA_DIR); an image built with
    # `berth wheelhouse --into DIR` carries it there, ready before the first start.
    WHEELHOUSE_DIR = None
    # Scale-out: how long `berth web`, `gateway` and `scheduler` wait at start for
    # `berth migrate` to bring the schema to their version (or for the database).
    MIGRATION_WAIT_SECONDS = 300
    # One JSON line per HTTP request on stderr (request id, route, status, time).
    ACCESS_LOG = True
    # Proxies in front of the HTTP server that set X-Forwarded-For and -Proto (the
    # compose file's HAProxy: 1). The client's address is then the one they saw: audit
    # events and the console's sign-in limit per address. 0 trusts no such header.
    PROXY_HOPS = 0
    WEBHOOK_CA_BUNDLE = None  # PEM file webhook receivers are verified against; None: certifi
    ERP_IMAGE = "odoo:{erp_version}"
    POSTGRES_IMAGE = "postgres:16"
    # The reverse proxy each server's agent runs (agent/proxy/): its image ("" runs
    # none, and environments answer only on their server's private networks), the
    # ACME directory its certificates come from, the ACME account's e-mail, and a
    # PEM file of roots to trust for the directory (a private ACME server; None:
    # the system's roots).
    PROXY_IMAGE = "caddy:2"
    ACME_DIRECTORY_URL = "https://acme-v02.api.letsencrypt.org/directory"
    ACME_EMAIL = None
    ACME_CA_ROOTS = None
    HTTP_THREADS = 16
    # Seconds a client has to send a request's headers, all of them (also how long
    # an idle keep-alive connection stays open), and then its body.
    HTTP_HEADER_TIMEOUT = 10
    HTTP_BODY_TIMEOUT = 30
    # Open HTTP connections beyond this are closed at once (the open file limit
    # is raised to fit it at start).
    HTTP_MAX_CONNECTIONS = 10000
    # Seconds a new agent connection has to finish its handshake (TLS when on, the
    # HTTP/2 preface and settings): a silent one is closed then, as a silent HTTP
    # client is at HTTP_HEADER_TIMEOUT.
    GRPC_HANDSHAKE_TIMEOUT = 10
    # Open agent connections (each gateway process) beyond this are closed at once.
    GRPC_MAX_CONNECTIONS = 10000
    # Servers reached over SSH (gateway/ssh/): the agent command there (the
    # installer's link), seconds to connect (TCP, SSH handshake and sign-in) and
    # for one live call, the calls open at once to one server and in total (the
    # commands followed are bounded apart: 4 a server), and how often each server
    # is checked (reachable, its facts).
    SSH_AGENT_PATH = "/usr/local/bin/berth-agent"
    SSH_CONNECT_TIMEOUT = 10
    SSH_CALL_TIMEOUT = 20
    SSH_SESSIONS_PER_SERVER = 4
    SSH_SESSIONS_TOTAL = 64
    SSH_CHECK_SECONDS = 30
    SSH_INSTALL_TIMEOUT = 900  # installing the agent there (a venv and its packages)
    SSH_DISK_SECONDS = 900  # the environments' disk use, as often as an agent measures it
    # Whether SSH servers may be at private, loopback or link-local addresses (the
    # control plane's own network): off, as for webhooks' receivers.
    SSH_ALLOW_PRIVATE = False
    # Fleet alerts (services/servers/alerts.py): a server unheard of for this long
    # is `server.unreachable`; a critical disk or memory figure held this long alerts.
    ALERT_UNREACHABLE_SECONDS = 90
    ALERT_HOLD_SECONDS = 120
    # An environment whose database or filestore grew by more than this over the
    # last day sends `environment.disk_growth` (services/servers/sizes.py; 0: never).
    GROWTH_ALERT_MB_PER_DAY = 5120
    BUILDS_PER_SERVER = 1  # builds a server runs at once; the next wait, queued
    # Resident agents' upgrades (services/servers/upgrades.py): whether agents older
    # than the control plane are upgraded without being asked, how many restart at
    # once, and the seconds a new version has to connect before it rolls back.
    AGENT_AUTO_UPGRADE = False
    AGENT_UPGRADE_CONCURRENCY = 10
    AGENT_UPGRADE_TIMEOUT = 120
    # Metric history (services/servers/history.py): whether agents' figures are kept,
    # how often each gateway writes what it gathered, and how long minute and hour
    # points are kept.
    METRICS_HISTORY = True
    METRICS_FLUSH_SECONDS = 60
    METRICS_MINUTE_RETENTION_HOURS = 48
    METRICS_HOUR_RETENTION_DAYS = 90
    # The audit log (services/audit.py): days an event is kept.
    AUDIT_RETENTION_DAYS = 90
    DEFAULT_SERVER_QUOTA = 10
    SUPPORT_TEAM_NAME = "Berth Support"
    # Seconds an in-flight idempotent request keeps its key claimed before a
    # retry may take it over (a crashed request must not block it forever).
    IDEMPOTENCY_LEASE_SECONDS = 60
    SQLITE_BUSY_TIMEOUT_MS = 15000
    # PostgreSQL: the hot statements (key check, list pages) are prepared once per
    # connection. Off behind a pooler in transaction mode (PgBouncer's default),
    # where a connection's prepared statements do not follow the client.
    DATABASE_PREPARED_STATEMENTS = True
    # How long DELETE /api/v1/deployments/environment/{id}/destroy waits for the
    # agent's answer before it replies 504 destroy_timeout (the destroy goes on).
    DESTROY_WAIT_SECONDS = 60
    # The scheduler's stuck-deployment check (spec: every 5 minutes).
    REAPER_INTERVAL_SECONDS = 300
    # Outgoing webhooks: how often the scheduler fans out events and sends what is
    # due; the send timeout (at most the spec's 10 s); the delays before attempts
    # 2..5 in seconds (spec: ~30 s, ~5 min, ~30 min, ~2 h; +-10 % jitter).
    WEBHOOK_POLL_SECONDS = "0.25"
    WEBHOOK_TIMEOUT_SECONDS = "10"
    WEBHOOK_RETRY_DELAYS = "30,300,1800,7200"
    # E-mail notification channels send through this SMTP server (None: e-mail
    # channels cannot be made). SMTP_SECURITY: `starttls`, `tls` (implicit, port 465)
    # or `none`; the server's certificate is checked against SMTP_CA_BUNDLE (None:
    # the system's roots). The password is read from the environment only.
    SMTP_HOST = None
    SMTP_PORT = 587
    SMTP_SECURITY = "starttls"
    SMTP_USERNAME = None
    SMTP_PASSWORD = None
    SMTP_FROM = "Berth <berth@localhost>"
    SMTP_CA_BUNDLE = None
    # Shell sessions into environments (services/servers/shells.py): at most this many
    # open on one server; one ends after SHELL_IDLE_SECONDS with no byte either way and
    # after SHELL_MAX_SECONDS in all. With SHELL_TRANSCRIPTS, what each session showed
    # (its first MiB) is kept with its record, as long as the audit log.
    SHELL_SESSIONS_PER_SERVER = 5
    SHELL_IDLE_SECONDS = 900
    SHELL_MAX_SECONDS = 28800
    SHELL_TRANSCRIPTS = False


_BOOL = {"1": True, "true": True, "yes": True, "on": True,
         "0": False, "false": False, "no": False, "off": False, "": False}


def _coerce(default, raw):
    if isinstance(default, bool):
        try:
            return _BOOL[raw.strip().lower()]
        except KeyError:
            raise ValueError(f"expected a boolean, got {raw!r}") from None
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected a whole number, got {raw!r}") from None
    return raw


_POSITIVE = ("HTTP_THREADS", "HTTP_HEADER_TIMEOUT", "HTTP_BODY_TIMEOUT", "HTTP_MAX_CONNECTIONS",
             "GRPC_HANDSHAKE_TIMEOUT", "GRPC_MAX_CONNECTIONS", "SSH_CONNECT_TIMEOUT",
             "SSH_CALL_TIMEOUT", "SSH_SESSIONS_PER_SERVER", "SSH_SESSIONS_TOTAL",
             "SSH_CHECK_SECONDS", "SSH_DISK_SECONDS", "SSH_INSTALL_TIMEOUT",
             "ALERT_UNREACHABLE_SECONDS", "ALERT_HOLD_SECONDS", "AGENT_UPGRADE_CONCURRENCY",
             "AGENT_UPGRADE_TIMEOUT", "METRICS_FLUSH_SECONDS", "METRICS_MINUTE_RETENTION_HOURS",
             "METRICS_HOUR_RETENTION_DAYS", "AUDIT_RETENTION_DAYS", "SHELL_SESSIONS_PER_SERVER",
             "SHELL_IDLE_SECONDS", "SHELL_MAX_SECONDS", "BUILDS_PER_SERVER")


_NOT_NEGATIVE = ("GROWTH_ALERT_MB_PER_DAY",)  # 0 turns the thing off


# Set but empty means the default (a deployment description can pass a variable
# through without repeating the default, which holds braces compose cannot quote).
_NEVER_EMPTY = ("ERP_IMAGE", "POSTGRES_IMAGE")

# PUBLIC_URL too: where the agent ships the environment's WAL (services/backups/wal.py).
IMAGE_SETTINGS = ("ERP_IMAGE", "POSTGRES_IMAGE", "PROXY_IMAGE", "ACME_DIRECTORY_URL", "ACME_EMAIL",
                  "ACME_CA_ROOTS", "APPS_DOMAIN", "PUBLIC_URL")


def images(settings):
    """The image, proxy and URL settings a deployment's command names (ERP_IMAGE a template on the
    project's version), taken once at start-up by what deploys outside a request:
    the gateway, for a registration's auto_deploy."""
    return {name: settings[name] for name in IMAGE_SETTINGS}


def grpc_public_address(settings, port=50051):
    """Where agents dial the gateway: CP_GRPC_PUBLIC_ADDRESS, or PUBLIC_URL's host
    and the gateway's port."""
    if settings["GRPC_PUBLIC_ADDRESS"]:
        return settings["GRPC_PUBLIC_ADDRESS"]
    from urllib.parse import urlparse

    return f"{urlparse(settings['PUBLIC_URL']).hostname}:{port}"


class SettingError(ValueError):
    """A setting the control plane refuses to start with (said in one line)."""


def load(overrides=None, environ=None):
    """Return the settings as a dict: defaults < CP_* environment < overrides.
    SettingError names the first setting that cannot be used."""
    environ = os.environ if environ is None else environ
    settings = {k: v for k, v in vars(Config).items() if k.isupper()}
    for name, default in list(settings.items()):
        raw = environ.get(f"CP_{name}")
        if raw is not None and not (raw == "" and name in _NEVER_EMPTY):
            try:
                settings[name] = _coerce(default, raw)
            except ValueError as exc:
                raise SettingError(f"CP_{name}: {exc}") from None
    settings.update(overrides or {})
    retry_delays(settings["WEBHOOK_RETRY_DELAYS"])  # refuse to start on a bad value
    if settings["SMTP_SECURITY"] not in ("starttls", "tls", "none"):
        raise SettingError("CP_SMTP_SECURITY must be starttls, tls or none, got "
                         f"{settings['SMTP_SECURITY']!r}")
    for name in _POSITIVE:
        if not (isinstance(settings[name], int) and settings[name] > 0):
            raise SettingError(f"CP_{name} must be a positive integer, got {settings[name]!r}")
    for name in _NOT_NEGATIVE:
        if not (isinstance(settings[name], int) and settings[name] >= 0):
            raise SettingError(f"CP_{name} must be a whole number (0: off), got {settings[name]!r}")
    settings["DATA_DIR"] = str(Path(settings["DATA_DIR"]).resolve())
    tighten(Path(settings["DATA_DIR"]))
    if not settings["SECRET_KEY"]:
        settings["SECRET_KEY"] = _stored_secret(Path(settings["DATA_DIR"]))
    return settings


def retry_delays(raw):
    """CP_WEBHOOK_RETRY_DELAYS ("30,300,1800,7200", or a list of numbers): the
    seconds before attempts 2, 3, ... as a tuple; empty means the default."""
    if not raw:
        raw = Config.WEBHOOK_RETRY_DELAYS
    parts = raw.split(",") if isinstance(raw, str) else raw
    try:
        delays = tuple(float(part) for part in parts)
    except (TypeError, ValueError):
        delays = ()
    if not delays or not all(0 <= d < math.inf for d in delays):  # also refuses NaN
        raise SettingError("CP_WEBHOOK_RETRY_DELAYS must be seconds separated by commas "
                         f"(e.g. 30,300,1800,7200), got {raw!r}")
    return delays


def private_dir(path):
    """Make `path` (and its parents) if missing; the directory itself is owner-only."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def tighten(data_dir):
    """The data dir holds the database, the secret key and what servers download:
    owner-only, the directory and everything in it (installs made before this
    rule had 0755/0644). SQLite gives -wal/-shm the database file's mode. A file
    may go while this walks (another process's last connection removes -wal/-shm
    as it closes): what is gone needs no tightening."""
    if not data_dir.is_dir():
        return
    private_dir(data_dir)
    for root, dirs, files in os.walk(data_dir):
        for name in dirs + files:
            path = Path(root) / name
            try:
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                    continue
                path.chmod(stat.S_IMODE(st.st_mode) & 0o700)
            except (FileNotFoundError, PermissionError):  # gone, or another user's file
                continue


def _stored_secret(data_dir):
    """The generated secret lives in the data dir, readable by its owner only."""
    private_dir(data_dir)
    path = data_dir / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value
