"""The Flask application factory."""

import logging
import time
from dataclasses import dataclass

import orjson
from flask import Flask, Response, g, jsonify, request
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SessionInterface
from werkzeug.exceptions import HTTPException

from control_plane.agent_link import AgentLink
from control_plane.api.auth import dispatch_confirmed
from control_plane.api.smorest import http_error_body
from control_plane.infra import config as config_mod
from control_plane.infra import db as db_mod
from control_plane.infra import observability, security
from control_plane.infra.ratelimit import RateLimiter
from control_plane.inputs import safe_input
from control_plane.services import audit
from control_plane.storage.tokens import PATH as STORAGE_PATH
from control_plane.vocabulary.errors import ApiError
from protocol.wire import REVISION

log = logging.getLogger("berth")


@dataclass
class Berth:
    """What the app holds besides Flask's config: the database and shared counters; the
    services' context (agent_link.Context) as `berth`."""

    settings: dict
    db: object
    limiter: RateLimiter
    # The way to the agents: the gateway when it runs in this process, else the
    # Redis relay (scale-out), else None.
    link: AgentLink | None = None
    # Servers reached over SSH (gateway/ssh/), from every process kind.
    ssh: object = None

    @property
    def gateway(self) -> AgentLink:
        """What services use to reach any server: SSH ones over SSH, the others by `link`."""
        from control_plane.gateway.ssh import Reach

        return Reach(self.link, self.ssh)

    @gateway.setter
    def gateway(self, link):
        self.link = link


def create_app(config=None):
    settings = config_mod.load(config)
    app = _Flask("control_plane")
    app.config.update(settings)
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
    app.json = _JSONProvider(app)
    app.json.sort_keys = False
    # `//` in a path is a JSON 404, not werkzeug's redirect (which has an HTML body).
    app.url_map.merge_slashes = False
    app.session_interface = _NoSessions()  # an API: no cookie session to open per request
    if settings["PROXY_HOPS"]:  # the client's address and scheme as the balancer saw them
        from werkzeug.middleware.proxy_fix import ProxyFix

        hops = settings["PROXY_HOPS"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)

    security.configure(settings["SECRET_KEY"])
    database = db_mod.init(settings)
    from control_plane.gateway.ssh import SshLink

    # One dict of settings: Flask's config is what the services read too, so a
    # setting changed at run time (tests do) is seen by views and services alike.
    app.extensions["berth"] = Berth(app.config, database, RateLimiter(settings["REDIS_URL"]),
                                    ssh=SshLink(app.config))
    if settings["REDIS_URL"]:
        # Until a gateway runs in this process, live requests go through Redis.
        from control_plane.gateway.relay import RedisRelay

        app.extensions["berth"].gateway = RedisRelay(settings["REDIS_URL"])

    _register_error_handlers(app)
    _observe(app)
    # First of all hooks (after the request id): query, path and header text no database can store is a 400
    # before authentication or a view looks anything up with it.
    app.before_request(lambda: safe_input.check_request(request._get_current_object()))

    @app.get("/healthz")
    def healthz():
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        return Response(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

    @app.get("/agent/bootstrap.json")
    def agent_bootstrap():
        """Where agents dial the gateway, and the protocol revision it speaks (read
        by the installer and `register`)."""
        return {"grpc_address": grpc_public_address(app),
                "grpc_tls": bool(app.config["GRPC_TLS_CERT"]), "revision": REVISION}

    from control_plane.api.agent_transfers import blp as agent_transfers
    from control_plane.api.agent_wal import blp as agent_wal
    from control_plane.api.installer import blp as installer
    from control_plane.api.ops import register as register_ops
    from control_plane.api.public import register as register_public
    from control_plane.api.storage_urls import blp as storage_urls
    from control_plane.console import register as register_console
    from control_plane.mcp.server import blp as mcp

    register_public(app)
    register_ops(app)
    app.register_blueprint(installer)
    app.register_blueprint(storage_urls)
    app.register_blueprint(agent_transfers)
    app.register_blueprint(agent_wal)
    register_console(app)  # the web console, at `/`
    app.register_blueprint(mcp)  # the MCP server, at `/mcp`
    return app


class _Flask(Flask):
    _sync = frozenset()

    def dispatch_request(self):
        return dispatch_confirmed(super().dispatch_request)

    def ensure_sync(self, func):
        """Flask asks on every request, for each hook and the view, whether it is a
        coroutine function (inspect, unwrapping it); a function's answer never
        changes, so a sync one is remembered (the app's functions: a bounded set)."""
        plain = getattr(func, "__func__", func)  # a MethodView's bound method
        if plain in self._sync:
            return func
        result = super().ensure_sync(func)
        if result is func:
            self._sync = self._sync | {plain}
        return result


# Dates go to Flask's own `default` (HTTP dates), as with the json module.
_ORJSON = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS \
    | orjson.OPT_APPEND_NEWLINE


class _JSONProvider(DefaultJSONProvider):
    def loads(self, s, **kwargs):
        return safe_input.loads(s)  # request.get_json parses as the API's bodies do

    def response(self, *args, **kwargs):
        """Compact answers through orjson (a list page encodes ~8x faster): the same
        JSON as Flask's, non-ASCII as UTF-8 rather than \\u escapes. What orjson
        refuses (non-string keys, integers past 64 bits, lone surrogates) and the
        indented debug output take Flask's own way."""
        if self.compact or (self.compact is None and not self._app.debug):
            try:
                body = orjson.dumps(self._prepare_response_obj(args, kwargs),
                                    default=self.default, option=_ORJSON)
            except orjson.JSONEncodeError:
                pass
            else:
                return self._app.response_class(body, mimetype=self.mimetype)
        return super().response(*args, **kwargs)


class _NoSessions(SessionInterface):
    def open_session(self, app, request):
        return None  # Flask then uses a NullSession, never saved

    def save_session(self, app, session, response):
        pass


access_log = logging.getLogger("berth.access")
# Paths whose rest is a permission (the local storage's signed URLs): whoever
# reads the log could use it until it expires, so the log keeps the prefix only,
# whatever follows it (a good token under a mistyped path or method as well).
SECRET_PATHS = (STORAGE_PATH,)


def loggable_path(path):
    for prefix in SECRET_PATHS:
        at = path.find(prefix)
        if at >= 0:
            return path[:at + len(prefix)] + "[redacted]"
    return path


def _observe(app):
    """Every request: an id (the client's X-Request-Id when it is a plain token),
    sent back in X-Request-Id and named in its log lines; its count and time by
    route and status for /metrics; one access log line (the path without its query,
    and without a signed URL's token: `loggable_path`)."""
    from control_plane.services.backlog import snapshot

    observability.watch_backlog(snapshot)
    logging_on = app.config["ACCESS_LOG"]

    app.teardown_request(_unbind_actor)

    @app.before_request
    def begin():
        ctx = g._get_current_object()  # each read through a context proxy costs a lookup
        ctx.started = time.perf_counter()
        ctx.request_id = observability.request_id(
            request._get_current_object().environ.get("HTTP_X_REQUEST_ID"))

    @app.after_request
    def finish(response):
        ctx = g._get_current_object()
        started = ctx.get("started")
        if started is None:  # a request that failed before `begin` (none so far)
            return response
        took = time.perf_counter() - started
        req = request._get_current_object()
        rid, method, status = ctx.request_id, req.method, response.status_code
        response.headers["X-Request-Id"] = rid
        route = req.url_rule.rule if req.url_rule is not None else "(unmatched)"
        observability.observe_request(method, route, status, took)
        if logging_on and access_log.isEnabledFor(logging.INFO):
            path = loggable_path(req.path)
            access_log.info("%s %s %s", method, path, status,
                            extra={"request_id": rid, "method": method, "path": path,
                                   "route": route, "status": status,
                                   "duration_ms": round(took * 1000, 2),
                                   "client": req.remote_addr})
        return response


def _unbind_actor(exc=None):
    """The request's actor (bound for a write by its surface's auth) ends with it."""
    token = g.pop("audit_token", None)
    if token is not None:
        audit.unbind(token)


def grpc_public_address(app, port=50051):
    return config_mod.grpc_public_address(app.config, port)


def _register_error_handlers(app):
    @app.errorhandler(ApiError)
    def domain_error(err):
        response = jsonify(err.body())
        response.status_code = err.status
        response.headers.update(err.headers)
        if err.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="berth"'
        return response

    @app.errorhandler(HTTPException)
    def http_error(err):
        body, status, headers = http_error_body(err)
        return jsonify(body), status, headers

    @app.errorhandler(Exception)
    def unexpected(err):
        log.exception("unhandled error", extra={"request_id": g.get("request_id")})
        return jsonify({"error": "internal_error", "message": "Internal error."}), 500
