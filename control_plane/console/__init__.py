"""The web console at `/`: server-rendered pages for an organization's users, on
the same service functions as the APIs, called with the signed-in user as the
actor (`actor()`; services/accounts/actors.py): what a key of their access may
do on the public API, and what their permissions allow on /api/v1.

Every request: the session cookie names a live session (else the sign-in page);
every write carries the session's CSRF token and comes from this origin; a
read-only user's writes are refused here, whatever the page showed. Pages run
only this package's scripts (htmx, uPlot, xterm.js, console.js) under a strict
Content-Security-Policy (the terminal's page alone allows inline styles: console/shells.py);
templates escape every value."""

import hashlib
from pathlib import Path
from urllib.parse import urlsplit

import marshmallow as ma
from flask import (
    Blueprint,
    current_app,
    g,
    jsonify,
    make_response,
    redirect,
    render_template,
    request,
    url_for,
)
from flask_compress import Compress
from werkzeug.exceptions import NotFound
from werkzeug.security import safe_join

from control_plane.api.smorest import http_error_body
from control_plane.console import form_errors
from control_plane.inputs import safe_input
from control_plane.services import audit
from control_plane.services.accounts import actors, sessions
from control_plane.vocabulary.errors import ApiError, CsrfFailed, WriteAccessRequired
from control_plane.vocabulary.errors import Unprocessable as FormInvalid

COOKIE = "berth_session"
ASSETS_PATH = "/console-assets"
# Assets are named by their content (`?v=` its hash): a browser keeps them a year and
# asks again only when a release changes them. Pages are compressed, not cached.
FOREVER = "public, max-age=31536000, immutable"
COMPRESSED = ["text/html", "text/css", "text/javascript", "application/javascript",
              "image/svg+xml"]  # never the APIs' JSON or a download
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
# Reached without a session (the sign-in page and the assets).
OPEN = frozenset(("console.sign_in", "console.static"))
# Writes a read-only user may make: their own sign-out, sessions, password and second
# factor.
SELF_SERVICE = frozenset(("console.sign_out", "console.end_session", "console.totp",
                          "console.change_password"))

blp = Blueprint("console", __name__, static_folder="static", static_url_path=ASSETS_PATH,
                template_folder="templates")


def berth():
    return current_app.extensions["berth"]


def user():
    """The signed-in user's own record (their account: password, second factor)."""
    return g.console_user


def actor():
    """Who is asking, for every service the pages call (services/accounts/actors.py)."""
    found = g.get("actor")
    if found is None:
        found = g.actor = actors.of_user(g.console_user)
    return found


def form(schema, fields=None):
    """The request's form as `schema` loads it (the API's own rules): blank fields
    are left out, so their defaults apply. A 422 naming each refused field."""
    names = fields or schema.fields
    return load(schema, {k: v.strip() for k, v in request.form.items()
                         if k in names and v.strip()})


def load(schema, given):
    """`given` as `schema` loads it; a 422 naming each refused field."""
    try:
        return schema.load(given)
    except ma.ValidationError as err:
        details = {field: form_errors.said(_texts(messages))
                   for field, messages in err.messages.items()}
        raise FormInvalid("; ".join(f"{field}: {words}" for field, words in details.items()),
                          fields=details) from None


def _texts(messages):
    if isinstance(messages, dict):
        return [t for m in messages.values() for t in _texts(m)]
    return [str(m) for m in messages] if isinstance(messages, list) else [str(messages)]


def render(template, code=200, **context):
    return render_template(f"console/{template}", **context), code


# What each disruptive action does, as its confirmation says it (`confirm`).
CONSEQUENCES = {
    "stop": "The ERP and its database stop: its users cannot reach it until it is started.",
    "restart": "The ERP restarts: its users are cut off for a few seconds.",
    "redeploy": "The environment is deployed again from its branch: its users are cut off "
                "while it restarts, and modules are updated if the code changed.",
    "deploy": "The environment is deployed from its branch: its users are cut off while it "
              "restarts, and modules are updated if the code changed.",
    "rollback": "The environment goes back to that deployment's code and configuration: "
                "its users are cut off while it restarts.",
    "delete rule": "The rule stops and is deleted; its run history goes with it.",
    "delete webhook": "No more events are sent to this address; its deliveries are deleted.",
    "delete channel": "No more events are sent to this channel; its deliveries are deleted.",
    "revoke key": "Every client using this key is refused from now on. It cannot be undone.",
    "end session": "That browser is signed out at its next request.",
    "remove domain": "The environment stops answering on this domain.",
    "delete project": "Its environments' containers, databases and files are removed from "
                      "their servers; their backups are kept as retention keeps them. "
                      "It cannot be undone.",
    "accept host key": "The control plane trusts the key the server offers now. Accept it "
                       "only if it is the one `ssh-keygen -lf` shows on the server itself: "
                       "otherwise another machine may be answering in its place.",
    "revoke token": "The install command holding it stops working; its server slot is freed.",
}


def confirm(action, title, *, name=None):
    """A disruptive action goes ahead once confirmed: the first post (no `confirmed`
    in its form) answers with a page that says what the action does and posts the
    same form again, confirmed; with `name` (production environments), that name
    must be typed again. Returns that page, or None to go ahead."""
    if request.form.get("confirmed") != "1":
        kept = [(k, v) for k, v in request.form.items(multi=True)
                if k not in ("csrf_token", "confirmed", "confirm_name")]
        return render("confirm.html", action=action, title=title, name=name, fields=kept,
                      consequence=CONSEQUENCES[action], back=_back())
    if name is not None and request.form.get("confirm_name", "").strip() != name:
        raise FormInvalid(f"Type the name, {name}, exactly to confirm.")
    return None


def _back():
    """Where Cancel goes: the page the form was on (this site's only)."""
    source = urlsplit(request.headers.get("Referer") or "")
    return (source.path or "/") + (f"?{source.query}" if source.query else "") \
        if source.netloc == request.host else "/"


def _same_origin():
    """A write's Origin (or, lacking it, Referer) is this site: a second guard
    besides the token, and the only one the sign-in form has."""
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source:
        return False
    return urlsplit(source).netloc == request.host


@blp.before_request
def _authenticate():
    endpoint = request.endpoint or ""
    writing = request.method not in ("GET", "HEAD")
    if writing:
        if not _same_origin():
            raise CsrfFailed("This form must be sent from the console's own pages.")
        for name, value in request.form.items(multi=True):  # as the APIs' bodies are
            safe_input.check_text(value, f"field {name}")
    if endpoint in OPEN:  # signing in again while signed in makes a new session
        return None
    raw = request.cookies.get(COOKIE)
    found = sessions.authenticate(raw) if raw else None
    if found is None:
        if request.headers.get("HX-Request"):  # a live part: the whole page goes to sign-in
            return "", 401, {"HX-Redirect": url_for("console.sign_in")}
        return redirect(url_for("console.sign_in", next=request.full_path.rstrip("?")))
    g.console_session, g.console_user = found
    g.console_raw = raw
    g.csrf_token = sessions.csrf_token(raw)
    if writing:
        presented = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token")
        if not sessions.csrf_ok(raw, presented):
            raise CsrfFailed("The form has expired; reload the page and try again.")
        if g.console_user.read_only and endpoint not in SELF_SERVICE:
            raise WriteAccessRequired("Your access is read-only.")
        _bind_actor()
    return None


def _bind_actor():
    g.audit_token = audit.bind(sessions.actor_for(
        g.console_user, request.remote_addr, g.get("request_id")))


def audited_read():
    """A GET that is an audit event (a backup's download): the user is its actor."""
    if "audit_token" not in g:
        _bind_actor()


@blp.after_request
def _headers(response):
    response = current_app.extensions["berth_compress"].after_request(response)
    headers = response.headers
    headers["Content-Security-Policy"] = g.get("csp", CSP)
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "console.static":
        headers["Cache-Control"] = "no-store"
    elif request.args.get("v") == _version(request.view_args["filename"]):
        headers["Cache-Control"] = FOREVER
    return response


_versions = {}


def _version(name):
    """An asset's content hash (of the installed package's own file), once per process;
    None for a name that is no asset."""
    if name not in _versions:
        path = safe_join(blp.static_folder, name)  # None: not a file of the folder
        try:
            data = Path(path).read_bytes() if path else None
        except OSError:
            data = None
        if data is None:
            return None  # not remembered: any name can be asked for
        _versions[name] = hashlib.sha256(data).hexdigest()[:16]
    return _versions[name]


@blp.errorhandler(ApiError)
def _error(err):
    """A refused action: the page's error panel (htmx swaps it in), or a page, with
    the error's headers (a 429's Retry-After)."""
    fields = err.extra.get("fields") if isinstance(err, FormInvalid) else None
    if fields and not request.headers.get("HX-Request") and (
            again := form_errors.page_again(fields)):
        return again
    page = "_error.html" if request.headers.get("HX-Request") else "error.html"
    return *render(page, err.status, error=err), err.headers


@blp.app_errorhandler(NotFound)  # an address nothing on this site answers
def _no_page(err):
    """A page for a browser, outside the APIs; the spec's JSON body (as the app's own
    handler gives it) for every /api/ path and every client that prefers JSON."""
    wanted = request.accept_mimetypes.best_match(("application/json", "text/html"))
    if request.path.startswith("/api/") or wanted != "text/html":
        body, status, headers = http_error_body(err)
        return jsonify(body), status, headers
    # Outside the console's blueprint: its headers and its context, given here.
    return _headers(make_response(render("not_found.html", 404, **_context())))


@blp.context_processor
def _context():
    return {"asset": lambda name: f"{ASSETS_PATH}/{name}?v={_version(name)}",
            "me": g.get("console_user"), "form_state": _form_state,
            "csrf_token": g.get("csrf_token")}


def _form_state(action):
    """(refusals by field, what was typed) when the form posted to `action` is shown
    again (console/form_errors.py); else two empty dicts."""
    if g.get("form_errors") and request.path == action:
        return g.form_errors, g.typed
    return {}, {}


def set_cookie(response, raw):
    secure = current_app.config["PUBLIC_URL"].startswith("https://") or request.is_secure
    response.set_cookie(COOKIE, raw, httponly=True, secure=secure, samesite="Lax",
                        max_age=int(sessions.SESSION_MAX.total_seconds()), path="/")
    return response


def register(app):
    from control_plane.console import (  # noqa: F401 - the views register on `blp`
        account,
        backups,
        builds,
        channels,
        environments,
        mails,
        organization,
        overview,
        projects,
        rules,
        servers,
        shells,
    )

    app.register_blueprint(blp)
    # The console's own answers only, whole (never a stream: a streamed answer
    # compressed piece by piece stalled the API documents' large bundle).
    app.config.update(COMPRESS_REGISTER=False, COMPRESS_STREAMS=False,
                      COMPRESS_MIMETYPES=COMPRESSED, COMPRESS_MIN_SIZE=1024)
    app.extensions["berth_compress"] = Compress(app)
