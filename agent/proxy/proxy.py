"""The reverse proxy on this server: one Caddy container, `berth-proxy`, that
answers every environment's host names over HTTPS and passes each request to
the environment's ERP container at its address on the environment's private
network (port 8069; `/websocket` to 8072 when the ERP runs workers, as Odoo
does). The ERP publishes no port of its own.

The proxy runs in the host's network namespace: it listens on the server's
ports 80 and 443 and reaches the ERP containers by their addresses, without
joining their networks, so it never connects one environment's network to
another's. Its admin API listens on a unix socket in the agent's data dir (no
TCP port anything else could reach).

The agent keeps the routes (environment → host names) in a file, renders
Caddy's whole configuration from them and the ERP containers' current
addresses, and loads it through the admin API: Caddy swaps configurations
without a restart, and the other environments' routes are the same before and
after. Certificates come from ACME on demand; before obtaining one, Caddy asks
the agent (`ask`, on loopback) whether the name is routed here, so nobody can
make it request certificates for other names. `watch` brings a missing or
stopped proxy back with its routes."""

import contextlib
import datetime as dt
import http.client
import http.server
import json
import os
import socket
import threading
import time
import urllib.parse
from pathlib import Path

from agent.config import write_private
from agent.errors import AgentError, ContainerNotFound, EngineError, engine_errors
from agent.proxy import certificates
from protocol.errors import AgentErrorCode

NAME, ROLE_LABEL = "berth-proxy", "berth.role"
MOUNT = "/berth-proxy"  # the state directory, at the same place inside the container
RETRY_AFTER = 30  # seconds, in the 503 a stopped environment's names answer
ERP_PORT, LONGPOLL_PORT = 8069, 8072
# Any other name (one just removed, say, while its certificate is still cached).
UNKNOWN = {"handle": [{"handler": "static_response", "status_code": 404,
                       "body": "No environment answers at this name.\n"}]}


class ProxyError(AgentError):
    code = AgentErrorCode.PROXY_FAILED


def listen_addresses():
    """Where the proxy listens: BERTH_AGENT_PROXY_HTTP / _HTTPS ("host:port" or a
    port; default every address, ports 80 and 443)."""
    def address(name, port):
        raw = os.environ.get(name, "") or str(port)
        return raw if ":" in raw else f":{raw}"
    return address("BERTH_AGENT_PROXY_HTTP", 80), address("BERTH_AGENT_PROXY_HTTPS", 443)


class Proxy:
    def __init__(self, docker_client, state_dir):
        self.docker = docker_client
        self.dir = Path(state_dir)
        self.lock = threading.RLock()
        self._ask = None  # the ask endpoint's server, started on first use
        self._loaded = None  # the configuration last loaded, as JSON text
        self._warmer = certificates.Warmer()

    # --- the routes -------------------------------------------------------------

    def settings(self):
        return _read_json(self.dir / "settings.json")

    def routes(self):
        return _read_json(self.dir / "routes.json")

    def configure(self, settings):
        """The control plane's proxy settings (image, ACME directory and e-mail,
        roots to trust for the directory), kept for `watch`."""
        with self.lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            roots = settings.get("acme_roots_pem")
            if roots:
                write_private(self.dir / "acme-roots.pem", roots)
            kept = {k: v for k, v in settings.items() if k != "acme_roots_pem"}
            kept["acme_roots"] = bool(roots)
            if kept != self.settings():
                write_private(self.dir / "settings.json", json.dumps(kept, indent=2))

    def route(self, env_id, hostnames, erp_container, longpolling=False):
        """The environment's host names to its ERP container, then the proxy reloaded."""
        with self.lock:
            routes = self.routes()
            routes[env_id] = {"hostnames": sorted(set(hostnames)), "erp": erp_container,
                              "longpolling": bool(longpolling)}
            self._save(routes)
            self.apply()

    def rename(self, env_id, hostnames):
        """New host names for a routed environment (a custom domain verified or removed)."""
        with self.lock:
            routes = self.routes()
            if env_id in routes:
                routes[env_id]["hostnames"] = sorted(set(hostnames))
                self._save(routes)
                self.apply()

    def unroute(self, env_id):
        with self.lock:
            routes = self.routes()
            if routes.pop(env_id, None) is not None:
                self._save(routes)
                self.apply()

    def _save(self, routes):
        write_private(self.dir / "routes.json", json.dumps(routes, indent=2, sort_keys=True))

    # --- the container and its configuration -------------------------------------

    def apply(self):
        """The proxy running with the current routes (started if need be)."""
        with self.lock:
            settings = self.settings()
            if not settings.get("image"):
                return False
            config = self.render(settings)
            text = json.dumps(config, indent=2)
            write_private(self.dir / "caddy.json", text)
            container = self._container()
            if container is None or container.status != "running" or not self._ours(container):
                self._start(settings["image"], container)
            else:
                self._load(config)
            self._loaded = text
            return True

    def _ours(self, container):
        """Whether the running proxy is this agent's: one left by an earlier
        installation, with another state directory, is replaced."""
        return any(m.get("Destination") == MOUNT and m.get("Source") == str(self.dir)
                   for m in container.attrs.get("Mounts") or ())

    def watch(self):
        """Called periodically: a proxy that is gone or stopped is started again
        with its routes; a configuration that no longer matches the containers'
        addresses (a restart gave an ERP another one) or this agent's ask
        endpoint is loaded again; certificates not yet valid are asked for.
        Returns what was done, or None."""
        with self.lock:
            settings = self.settings()
            if not settings.get("image"):
                return None
            container = self._container()
            if container is None or container.status != "running" or not self._ours(container):
                self.apply()
                done = "started" if container is None else "restarted"
            elif json.dumps(self.render(settings), indent=2) != self._loaded:
                self.apply()
                done = "reloaded"
            else:
                done = None
        self._warm()
        return done

    def _container(self):
        try:
            with engine_errors():
                return self.docker.containers.get(NAME)
        except ContainerNotFound:
            return None

    def _start(self, image, old):
        if old is not None:
            with contextlib.suppress(EngineError), engine_errors():
                old.remove(force=True)
        (self.dir / "admin.sock").unlink(missing_ok=True)
        try:
            with engine_errors():
                container = self.docker.containers.run(
                    image, name=NAME, detach=True, network_mode="host",
                    labels={ROLE_LABEL: "proxy"}, restart_policy={"Name": "unless-stopped"},
                    command=["caddy", "run", "--config", f"{MOUNT}/caddy.json"],
                    volumes={str(self.dir): {"bind": MOUNT, "mode": "rw"}})
        except EngineError as exc:
            raise ProxyError(f"the proxy ({image}) could not start: {exc.detail}") from exc
        try:
            _wait_for_socket(self.dir / "admin.sock", container)
        except ProxyError:
            # The next try starts afresh.
            with contextlib.suppress(EngineError), engine_errors():
                container.remove(force=True)
            raise

    def _load(self, config, timeout=10):
        """POST /load; retried while the admin socket is briefly away (Caddy makes it
        anew when a configuration is loaded)."""
        body, deadline = json.dumps(config).encode(), time.monotonic() + timeout
        while True:
            try:
                with _admin(self.dir / "admin.sock") as conn:
                    conn.request("POST", "/load", body, {"Content-Type": "application/json"})
                    answer = conn.getresponse()
                    text = answer.read().decode(errors="replace")
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if time.monotonic() > deadline:
                    raise ProxyError(f"the proxy's admin API did not answer: {exc}") from exc
                time.sleep(0.1)
            except OSError as exc:
                raise ProxyError(f"the proxy's admin API did not answer: {exc}") from exc
        if answer.status != 200:
            raise ProxyError(f"the proxy refused its configuration: {text[:500]}")

    def health(self):
        """Whether the proxy runs and its admin API answers."""
        container = self._container()
        if container is None or container.status != "running":
            return {"running": False, "reason": "not started" if container is None
                    else f"container {container.status}"}
        try:
            with _admin(self.dir / "admin.sock") as conn:
                conn.request("GET", "/config/admin")
                ok = conn.getresponse().status == 200
        except OSError as exc:
            return {"running": False, "reason": f"admin API: {exc}"}
        return {"running": ok, "reason": None if ok else "admin API did not answer 200"}

    # --- certificates ----------------------------------------------------------------

    def certificates(self):
        return certificates.states(self.dir, self.routes())

    def report(self):
        """What `berth-agent status` and the control plane show."""
        return {**self.health(), "certificates": self.certificates(),
                "checked_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}

    def _warm(self):
        host, port = listen_addresses()[1].rsplit(":", 1)
        self._warmer.warm(self.certificates(), (host.strip("[]") or "127.0.0.1", int(port)))

    # --- Caddy's configuration ---------------------------------------------------

    def render(self, settings):
        http_listen, https_listen = listen_addresses()
        routes = []
        for env_id, route in sorted(self.routes().items()):
            address = self._address(route["erp"])
            routes.append({"@id": f"env-{env_id}", "match": [{"host": route["hostnames"]}],
                           "handle": [_handler(address, route["longpolling"])],
                           "terminal": True})
        issuer = {"module": "acme", "ca": settings["acme_directory"]}
        if settings.get("acme_email"):
            issuer["email"] = settings["acme_email"]
        if settings.get("acme_roots"):
            issuer["trusted_roots_pem_files"] = [f"{MOUNT}/acme-roots.pem"]
        return {
            # The admin API checks the Host header: the agent sends "localhost".
            "admin": {"listen": f"unix/{MOUNT}/admin.sock", "origins": ["localhost"],
                      "config": {"persist": False}},
            "storage": {"module": "file_system", "root": f"{MOUNT}/data"},
            "logging": {"logs": {"default": {
                "writer": {"output": "file", "filename": f"{MOUNT}/caddy.log",
                           "roll_size_mb": 10, "roll_keep": 2},
                "encoder": {"format": "json"}}}},
            "apps": {
                "http": {"http_port": _port(http_listen), "https_port": _port(https_listen),
                         "servers": {
                             "https": {"listen": [https_listen], "routes": [*routes, UNKNOWN]},
                             "http": {"listen": [http_listen], "routes": []}}},
                "tls": {"automation": {
                    "on_demand": {"ask": self.ask_url()},
                    "policies": [{"on_demand": True, "issuers": [issuer]}]}},
            },
        }

    def _address(self, erp_container):
        """The ERP container's address on its network, or None (stopped, gone)."""
        try:
            with engine_errors():
                container = self.docker.containers.get(erp_container)
        except ContainerNotFound:
            return None
        if container.status != "running":
            return None
        networks = container.attrs["NetworkSettings"]["Networks"] or {}
        return next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), None)

    # --- the ask endpoint ----------------------------------------------------------

    def ask_url(self):
        """Loopback only; Caddy, in the host's network, reaches it."""
        with self.lock:
            if self._ask is None:
                proxy = self

                class Ask(http.server.BaseHTTPRequestHandler):
                    def do_GET(self):  # noqa: N802 - the standard library's name
                        query = urllib.parse.urlparse(self.path).query
                        name = (urllib.parse.parse_qs(query).get("domain") or [""])[0].lower()
                        known = any(name in r["hostnames"] for r in proxy.routes().values())
                        self.send_response(200 if known else 403)
                        self.send_header("Content-Length", "0")
                        self.end_headers()

                    def log_message(self, *args):
                        pass

                self._ask = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ask)
                self._ask.daemon_threads = True
                threading.Thread(target=self._ask.serve_forever, name="berth-proxy-ask",
                                 daemon=True).start()
            return f"http://127.0.0.1:{self._ask.server_address[1]}/ask"


def _handler(address, longpolling):
    if address is None:  # stopped (or being updated: a deploy's module update)
        return {"handler": "static_response", "status_code": 503,
                "headers": {"Retry-After": [str(RETRY_AFTER)]},
                "body": "This environment is not running.\n"}
    main = {"handler": "reverse_proxy", "upstreams": [{"dial": f"{address}:{ERP_PORT}"}]}
    if not longpolling:
        return main
    return {"handler": "subroute", "routes": [
        {"match": [{"path": ["/websocket", "/websocket/*"]}],
         "handle": [{"handler": "reverse_proxy",
                     "upstreams": [{"dial": f"{address}:{LONGPOLL_PORT}"}]}]},
        {"handle": [main]}]}


def _port(listen):
    return int(listen.rsplit(":", 1)[1])


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        if len(self.path) < 100:
            self.sock.connect(self.path)
            return
        # A socket path has a limit of 107 bytes: a long one is reached through the
        # directory's file descriptor.
        parent = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.sock.connect(f"/proc/self/fd/{parent}/{os.path.basename(self.path)}")
        finally:
            os.close(parent)


@contextlib.contextmanager
def _admin(path):
    conn = _UnixConnection(path)
    try:
        yield conn
    finally:
        conn.close()


def _wait_for_socket(path, container, timeout=20):
    """Until the admin API answers; a proxy that exits first (its ports taken,
    say) is reported with the last line it wrote."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine_errors():
            container.reload()
        if container.status in ("exited", "dead", "restarting"):
            with engine_errors():
                said = container.logs(tail=20).decode(errors="replace").strip().splitlines()
            why = next((line for line in reversed(said) if "rror" in line), said[-1:] or [""])
            raise ProxyError(f"the proxy stopped as it started: {str(why)[:400]}")
        if path.exists():
            try:
                with _admin(path) as conn:
                    conn.request("GET", "/config/admin")
                    if conn.getresponse().status == 200:
                        return
            except OSError:
                pass
        time.sleep(0.1)
    raise ProxyError(f"the proxy's admin API did not come up within {timeout} s")
