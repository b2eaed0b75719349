"""Public-API request hooks: authenticate the key, count it against its rate
limit, refuse writes it may not make; stamp the key id and limit headers on
every response it gets, errors included."""

from flask import current_app, g, request

from control_plane.agent_link import current_berth
from control_plane.infra import ratelimit
from control_plane.services import audit
from control_plane.services.accounts import actors, keys
from control_plane.vocabulary.errors import Unauthorized


def key_checked_by_page(view):
    """Marks a list view (GET) whose page statement re-reads the request's key
    (services.accounts.scope.scoped_page): authentication then spares its own
    read of the key's row, one round trip on every list request."""
    view.key_checked_by_page = True
    return view


_DEFERS = {}  # endpoint -> whether its GET is marked key_checked_by_page


def _defers(req):
    if req.method not in ("GET", "HEAD") or req.url_rule is None:
        return False
    endpoint = req.url_rule.endpoint
    marked = _DEFERS.get(endpoint)
    if marked is None:
        view = current_app.view_functions.get(endpoint)
        handler = getattr(getattr(view, "view_class", None), "get", view)
        marked = _DEFERS[endpoint] = getattr(handler, "key_checked_by_page", False)
    return marked


def _authenticate_key(req, *, defer=False):
    """The request's key, active (or a 401 saying why not)."""
    headers = req.headers
    raw = keys.presented_key(headers.get("Authorization"), headers.get("X-API-Key"))
    return keys.authenticate(raw, current_app.extensions["berth_keys"], defer=defer)


def authenticate_request():
    # Each read through Flask's context proxies costs a lookup: the objects once.
    req, ctx = request._get_current_object(), g._get_current_object()
    key = _counted_key(req, ctx, defer=_defers(req))
    keys.authorize_method(key, req.method)
    if req.method not in ("GET", "HEAD"):  # what it changes is the key's (services/audit.py)
        _bind(ctx, req, key)


def authenticate_acting_key():
    """The request's key authenticated and counted as on the public API, and the audit
    actor of whatever the request does, read or write: for /mcp, whose every message is
    a POST and which decides per message what the key may do (control_plane/mcp)."""
    req, ctx = request._get_current_object(), g._get_current_object()
    _bind(ctx, req, _counted_key(req, ctx))
    return current_actor()


def _counted_key(req, ctx, *, defer=False):
    try:
        key = ctx.api_key = _authenticate_key(req, defer=defer)
    except Unauthorized as exc:
        _name_refused(ctx, exc)
        raise
    ctx.rate_state = current_berth().limiter.hit(
        ratelimit.PER_KEY[key.key_type], "key", key.public_id)
    return key


def _name_refused(ctx, exc, state=None):
    """A 401 for a key that exists (revoked, expired) still carries its id and its
    window, as every answer does: `state` when the request was counted already,
    else the window read and not counted (a refused key uses none of it). An
    unknown or missing key has neither."""
    key = getattr(exc, "key", None)
    if key is not None:
        ctx.refused_key = key
        ctx.rate_state = state or current_berth().limiter.window(
            ratelimit.PER_KEY[key.key_type], "key", key.public_id)


def _bind(ctx, req, key):
    ctx.audit_token = audit.bind(audit.Actor("api_key", key.public_id, key.name,
                                             req.remote_addr, ctx.get("request_id")))


def audited_read():
    """A GET that is an audit event (a backup's download links): the key is its actor."""
    ctx = g._get_current_object()
    if "audit_token" not in ctx:
        _bind(ctx, request._get_current_object(), ctx.api_key)


_STAMPED = frozenset(("x-api-key-id", "x-ratelimit-limit", "x-ratelimit-remaining",
                      "x-ratelimit-window"))


def stamp_headers(response):
    ctx = g._get_current_object()
    key = ctx.get("api_key") or ctx.get("refused_key")
    if key is None:
        return response
    headers, state = response.headers, ctx.get("rate_state")
    if state is None:  # the 429 itself: its headers were set when it was raised
        headers["X-API-Key-Id"] = key.public_id
        headers.setdefault("X-RateLimit-Window", str(ratelimit.WINDOW_SECONDS))
        return response
    stamped = [("X-API-Key-Id", key.public_id), *ratelimit.header_items(state)]
    # Appended in one go (werkzeug's `set` rescans the list per header), unless the
    # answer carries some already (a per-target 429): the key's figures replace them.
    if _STAMPED.isdisjoint(name.lower() for name, _ in headers):
        headers.extend(stamped)
    else:
        for name, value in stamped:
            headers[name] = value
    return response


def current_key():
    return g.api_key


def current_actor():
    """The request's key as an Actor (services/accounts/actors.py), resolved once."""
    actor, key = g.get("actor"), g.api_key
    if actor is None or actor.key is not key:  # a deferred check may read the key anew
        actor = g.actor = actors.of_key(key)
    return actor


def dispatch_confirmed(dispatch):
    """Runs the view. A request whose key check was deferred (key_checked_by_page)
    has its key's row compared before anything is answered, error or not: by the
    view's own page statement, else read here. If the key changed meanwhile, it
    is authenticated again (a 401 if it was revoked, deleted or expired) and the
    view, a read, runs once more with the key as it now is."""
    try:
        result = dispatch()
    except Exception:
        if keys.confirm():
            raise
    else:
        if keys.confirm():
            return result
    ctx = g._get_current_object()
    ctx.api_key = None  # until it authenticates again
    try:
        ctx.api_key = _authenticate_key(request._get_current_object())
    except Unauthorized as exc:
        _name_refused(ctx, exc, ctx.rate_state)  # the request was counted once, before
        raise
    return dispatch()


def init_app(app, prefix, open_paths):
    """Every request under the public prefix, matched or not (so a 404 or 405 is
    counted and stamped too, and a read-only key's PUT is a 403), except the
    documentation at `open_paths`."""
    open_paths = {f"{prefix}/{p.strip('/')}" for p in open_paths}
    app.extensions["berth_keys"] = keys.KeyCache()

    def guarded():
        path = request.path
        return path.startswith(prefix + "/") and path.rstrip("/") not in open_paths

    @app.before_request
    def _authenticate():
        keys.forget_unchecked()  # a worker thread's previous request ended
        if guarded():
            authenticate_request()

    # Only a guarded request has a key in `g` (set above), so no second path test.
    app.after_request(stamp_headers)
