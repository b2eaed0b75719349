"""Signing in and out, and the user's own account: sessions and the second factor."""

import datetime as dt

import segno
from flask import g, redirect, request, url_for
from itsdangerous import BadSignature
from limits import RateLimitItemPerMinute

from control_plane.console import berth, blp, confirm, render, set_cookie, user
from control_plane.console.form_errors import beside
from control_plane.infra import clock, security
from control_plane.services.accounts import sessions
from control_plane.services.accounts import totp as second_factor  # `totp` is the view
from control_plane.vocabulary.errors import (
    ApiError,
    InvalidCredentials,
    InvalidTotpCode,
    RateLimited,
    WeakPassword,
)

# Guesses are slow (Argon2) and few: per address, and per e-mail from any address.
SIGN_IN_PER_IP = RateLimitItemPerMinute(10)
SIGN_IN_PER_EMAIL = RateLimitItemPerMinute(5)
OFFER_TTL = dt.timedelta(minutes=15)  # a second factor's set-up form


def _next_page():
    """Where to go after signing in: a path of this site only. Browsers drop tabs and
    newlines from a URL and read a backslash as a slash (a tab between two slashes
    makes "//evil.example", another host), and a newline cannot be in a header at
    all: a target with any control character goes home."""
    target = request.values.get("next") or ""
    if (not target.startswith("/") or target.startswith("//") or "\\" in target
            or not target.isprintable()):
        return url_for("console.home")
    return target


@blp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    target = _next_page()
    if request.method == "GET":
        return render("sign_in.html", next=target)
    email = request.form.get("email", "").strip()[:320]
    password = request.form.get("password", "")[:sessions.PASSWORD_MAX]
    try:
        berth().limiter.hit_all([
            (SIGN_IN_PER_IP, "console-sign-in:ip", (request.remote_addr,), None),
            (SIGN_IN_PER_EMAIL, "console-sign-in:email", (email.lower(),), None)])
        raw, _ = sessions.sign_in(email, password, request.form.get("code"),
                                  ip=request.remote_addr,
                                  user_agent=request.headers.get("User-Agent"),
                                  request_id=g.get("request_id"))
    except RateLimited as err:
        return render("sign_in.html", 429, next=target, email=email,
                      message=f"Too many attempts; try again in {err.extra['retry_after']} s.")
    except ApiError as err:
        return render("sign_in.html", 401, next=target, email=email, message=err.message)
    return set_cookie(redirect(target, 303), raw)


@blp.post("/sign-out")
def sign_out():
    sessions.end_session(user(), g.console_session.id)
    response = redirect(url_for("console.sign_in"), 303)
    response.delete_cookie("berth_session", path="/")
    return response


@blp.get("/account")
def account():
    return render("account.html", sessions=sessions.sessions_of(user()),
                  current=g.console_session.id, offer=_offer())


def _offer():
    """A second factor to set up: its secret travels signed in the form, with the
    time it was offered, so nothing is stored until a code from it is confirmed and
    an old page's offer (one that leaked) is refused."""
    if user().totp_secret is not None:
        return None
    secret, uri = second_factor.offer(user())
    sealed = [str(user().id), secret, clock.now().isoformat()]
    # Dark on white in either colour scheme: what cameras read. A data: URI (the page's
    # policy allows data: images): the secret never leaves this answer.
    qr = segno.make(uri, error="m").svg_data_uri(scale=4, border=2, dark="#111827",
                                                 light="#ffffff")
    return {"secret": secret, "uri": uri, "qr": qr,
            "sealed": security.signer("console-totp").dumps(sealed)}


def _offered_secret():
    try:
        user_id, secret, offered = security.signer("console-totp").loads(
            request.form.get("sealed", ""))
        fresh = clock.now() - dt.datetime.fromisoformat(offered) < OFFER_TTL
    except (BadSignature, ValueError, TypeError):
        fresh = False
    if not fresh or user_id != str(user().id):
        raise ApiError("The set-up form has expired; reload the page.")
    return secret


@blp.post("/account/password")
def change_password():
    # As many guesses of the current password as a sign-in allows.
    berth().limiter.hit(SIGN_IN_PER_EMAIL, "console-sign-in:email", user().email.lower())
    current, new = request.form.get("current", ""), request.form.get("new", "")
    with beside("current", InvalidCredentials), beside("new", WeakPassword):
        sessions.change_password(user(), current[:sessions.PASSWORD_MAX], new,
                                 g.console_session.id)
    return redirect(url_for("console.account", done="password"), 303)


@blp.post("/account/sessions/<uuid:session_id>/end")
def end_session(session_id):
    if session_id != g.console_session.id and (asked := confirm("end session",
                                                                "End that session?")):
        return asked
    sessions.end_session(user(), session_id)
    if session_id == g.console_session.id:
        return redirect(url_for("console.sign_in"), 303)
    return redirect(url_for("console.account"), 303)


@blp.post("/account/totp")
def totp():
    code = request.form.get("code", "")
    if request.form.get("action") == "disable":
        # Guesses of a code count against the e-mail's sign-in limit, as codes there do.
        berth().limiter.hit(SIGN_IN_PER_EMAIL, "console-sign-in:email", user().email.lower())
        with beside("code", InvalidTotpCode):
            sessions.totp_disable(user(), code)
        return redirect(url_for("console.account", done="totp-off"), 303)
    secret = _offered_secret()
    with beside("code", InvalidTotpCode):
        sessions.totp_enable(user(), secret, code, g.console_session.id)
    return redirect(url_for("console.account", done="totp-on"), 303)
