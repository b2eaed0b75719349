"""Public-API request hooks: authenticate the key, count it against its rate
limit, refuse writes it may not make; stamp the key id and limit headers on
every response it gets, errors included."""

from flask import current_app, g, request

from control_plane import ratelimit
from control_plane.services import keys


def authenticate_request():
    raw = keys.presented_key(request.headers.get("Authorization"),
                             request.headers.get("X-API-Key"))
    key = keys.authenticate(raw)
    g.api_key = key
    limiter = current_app.extensions["berth"].limiter
    g.rate_state = limiter.hit(ratelimit.PER_KEY[key.key_type], "key", key.public_id)
    keys.authorize_method(key, request.method)


def stamp_headers(response):
    key = g.get("api_key")
    if key is not None:
        response.headers["X-API-Key-Id"] = key.public_id
        state = g.get("rate_state")
        if state is not None:
            response.headers.update(ratelimit.headers_for(state))
        else:  # the 429 itself: its headers were set when it was raised
            response.headers.setdefault("X-RateLimit-Window", str(ratelimit.WINDOW_SECONDS))
    return response


def current_key():
    return g.api_key


def init_blueprint(blp):
    blp.before_request(authenticate_request)
    blp.after_request(stamp_headers)
    return blp
