"""Public-API request hooks: authenticate the key, count it against its rate
limit, refuse writes it may not make; stamp the key id and limit headers on
every response it gets, errors included."""

from flask import current_app, g, request

from control_plane import ratelimit
from control_plane.services.accounts import keys


def authenticate_request():
    # Each read through Flask's context proxies costs a lookup: the objects once.
    req, ctx = request._get_current_object(), g._get_current_object()
    headers = req.headers
    raw = keys.presented_key(headers.get("Authorization"), headers.get("X-API-Key"))
    extensions = current_app.extensions
    key = ctx.api_key = keys.authenticate(raw, extensions["berth_keys"])
    ctx.rate_state = extensions["berth"].limiter.hit(
        ratelimit.PER_KEY[key.key_type], "key", key.public_id)
    keys.authorize_method(key, req.method)


_STAMPED = frozenset(("x-api-key-id", "x-ratelimit-limit", "x-ratelimit-remaining",
                      "x-ratelimit-window"))


def stamp_headers(response):
    ctx = g._get_current_object()
    key = ctx.get("api_key")
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
        if guarded():
            authenticate_request()

    # Only a guarded request has a key in `g` (set above), so no second path test.
    app.after_request(stamp_headers)
