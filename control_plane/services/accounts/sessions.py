"""The web console's sign-in: users' passwords (Argon2id), an optional second
factor (TOTP, RFC 6238) and server-side sessions a user or the operator can end.

A browser holds a random session token in a cookie; only its digest is stored, as
for API keys. A session lasts SESSION_IDLE past its last use, never longer than
SESSION_MAX after sign-in. Its CSRF token is derived from the session token (an
HMAC under CP_SECRET_KEY), so a page and its forms need no stored state."""

import datetime as dt
import hmac

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from peewee import fn

from control_plane.infra import clock, security
from control_plane.infra.db import database
from control_plane.models import ApiKey, User, WebSession
from control_plane.models.org import USER_ACCESS
from control_plane.services import audit
from control_plane.services.accounts import totp
from control_plane.vocabulary.errors import (
    ApiError,
    Conflict,
    InvalidCredentials,
    NotFound,
    WeakPassword,
)

TOKEN_PREFIX = "ses_"
SESSION_IDLE = dt.timedelta(hours=12)
SESSION_MAX = dt.timedelta(days=7)
TOUCH_EVERY = dt.timedelta(minutes=1)  # a session's last use is written at most this often
PASSWORD_MIN, PASSWORD_MAX = 12, 1024

# Argon2id at the library's defaults (RFC 9106's second recommended set: 64 MiB, t=3).
_hasher = PasswordHasher()
# Verified when no user has the e-mail given, so that a sign-in takes as long either way.
_DUMMY = _hasher.hash(security.random_token(24))


def check_password(password):
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise WeakPassword(f"The password must be {PASSWORD_MIN} to {PASSWORD_MAX} characters "
                           "long.")


def new_password():
    """A password to hand a new user once (24 URL-safe characters, ~143 bits)."""
    return security.random_token(24)


def _active_user(user_id):
    user = User.get_or_none(User.id == user_id)
    if user is None or user.deleted_at is not None:
        raise NotFound("user not found")
    return user


def set_password(user_id, password):
    """A new password; every session of the user ends (whoever knew the old one)."""
    check_password(password)
    with database.atomic():
        user = _active_user(user_id)
        user.password_hash = _hasher.hash(password)
        user.save(only=[User.password_hash])
        ended = _end_sessions(user.id)
        audit.record(user.organization_id, "user.password_set", "user", user.id)
    return user, ended


def change_password(user, current, new, keep_session_id):
    """The user's own change, with their current password: their other sessions end,
    this one stays."""
    if user.password_hash is None or not _verified(user, current):
        raise InvalidCredentials("The current password is not right.")
    check_password(new)
    with database.atomic():
        user.password_hash = _hasher.hash(new)
        user.save(only=[User.password_hash])
        _end_sessions(user.id, keep=keep_session_id)
        audit.record(user.organization_id, "user.password_set", "user", user.id)


def set_access(user_id, access):
    if access not in USER_ACCESS:
        raise ApiError(f"access must be one of: {', '.join(USER_ACCESS)}")
    with database.atomic():
        user = _active_user(user_id)
        user.access = access
        user.save(only=[User.access])
        audit.record(user.organization_id, "user.update", "user", user.id, {"access": access})
    return user


# --- signing in ----------------------------------------------------------------------

def _verified(user, password):
    try:
        return _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def sign_in(email, password, code=None, *, ip=None, user_agent=None, request_id=None):
    """A new session for the user with this e-mail and password (and TOTP code, when
    they set one up): (raw token, session). Nothing says which part was wrong."""
    # Whatever its case: e-mails are written as people type them. Each database
    # lowers both sides, so they agree even where its LOWER and Python's differ.
    candidates = list(User.select().where(fn.LOWER(User.email) == fn.LOWER(email.strip()),
                                          User.deleted_at.is_null(),
                                          User.password_hash.is_null(False)))
    user = next((u for u in candidates if _verified(u, password)), None)
    if not candidates:
        _verified(User(password_hash=_DUMMY), password)
    if user is None:
        raise InvalidCredentials("The e-mail or the password is not right.")
    raw = TOKEN_PREFIX + security.random_token(40)
    now = clock.now()
    with database.atomic():
        if user.totp_secret is not None:
            totp.accept(user, code)  # the code is spent with the session it opens
        session = WebSession.create(user=user, token_hash=security.digest(raw), last_seen_at=now,
                                    expires_at=now + SESSION_IDLE, ip=ip,
                                    user_agent=(user_agent or "")[:255] or None)
        with audit.acting(actor_for(user, ip, request_id)):
            audit.record(user.organization_id, "user.sign_in", "session", session.id)
    return raw, session


def actor_for(user, ip=None, request_id=None):
    return audit.Actor("user", str(user.id), user.email, ip, request_id)


def authenticate(raw):
    """(session, user) for a live session token, else None. Each use moves its idle
    expiry on (written at most once a minute), up to SESSION_MAX after sign-in."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 128:
        return None
    row = (WebSession.select(WebSession, User).join(User)
           .where(WebSession.token_hash == security.digest(raw)).first())
    now = clock.now()
    if (row is None or row.revoked_at is not None or row.expires_at <= now
            or row.user.deleted_at is not None):
        return None
    if now - row.last_seen_at >= TOUCH_EVERY:
        row.last_seen_at = now
        row.expires_at = min(now + SESSION_IDLE, row.created_at + SESSION_MAX)
        row.save(only=[WebSession.last_seen_at, WebSession.expires_at])
    return row, row.user


def csrf_token(raw):
    """The token every write of this session must carry (forms and htmx requests)."""
    return hmac.new(security.derived_key("console-csrf"), raw.encode(), "sha256").hexdigest()


def csrf_ok(raw, presented):
    return bool(presented) and hmac.compare_digest(csrf_token(raw), presented)


def sessions_of(user):
    now = clock.now()
    return list(WebSession.select().where(WebSession.user == user.id,
                                          WebSession.revoked_at.is_null(),
                                          WebSession.expires_at > now)
                .order_by(WebSession.created_at.desc()))


def end_session(user, session_id):
    """The user ends one of their sessions (sign-out, or another browser's)."""
    with database.atomic():
        n = (WebSession.update(revoked_at=clock.now())
             .where(WebSession.id == session_id, WebSession.user == user.id,
                    WebSession.revoked_at.is_null()).execute())
        if not n:
            raise NotFound("No such session.")
        audit.record(user.organization_id, "session.revoke", "session", session_id)


def _end_sessions(user_id, keep=None):
    """Ends the user's live sessions, but `keep`; returns how many ended."""
    ended = WebSession.update(revoked_at=clock.now()).where(WebSession.user == user_id,
                                                           WebSession.revoked_at.is_null())
    return (ended.where(WebSession.id != keep) if keep else ended).execute()


def end_all_sessions(user_id):
    """The operator signs a user out everywhere; returns how many sessions ended."""
    with database.atomic():
        user = _active_user(user_id)
        ended = _end_sessions(user.id)
        audit.record(user.organization_id, "user.sessions_revoke", "user", user.id,
                     {"sessions": ended})
    return ended


# --- the second factor ---------------------------------------------------------------

def totp_enable(user, secret, code, keep_session_id):
    """The user confirms a code of a new secret: the factor is on, and their other
    sessions end (whoever signed in without it). One already on is turned off first,
    with a code from it: an offer alone never replaces it."""
    sealed = totp.seal(secret)
    with database.atomic():
        if not (User.update(totp_secret=sealed)
                .where(User.id == user.id, User.totp_secret.is_null()).execute()):
            raise Conflict("The second factor is already on: turn it off (with a code from "
                           "it) before setting up another.")
        totp.accept(user, code, secret=secret)
        user.totp_secret = sealed
        _end_sessions(user.id, keep=keep_session_id)
        audit.record(user.organization_id, "user.totp_enable", "user", user.id)


def totp_disable(user, code):
    if user.totp_secret is None:
        return
    with database.atomic():
        totp.accept(user, code)
        _totp_off(user)


def totp_reset(user_id):
    """The operator turns a user's second factor off (a lost device); the user signs
    in with the password alone and may set it up again."""
    with database.atomic():
        _totp_off(_active_user(user_id))


def _totp_off(user):
    user.totp_secret = user.totp_last_step = None
    user.save(only=[User.totp_secret, User.totp_last_step])
    audit.record(user.organization_id, "user.totp_disable", "user", user.id)


# --- acting as a key -----------------------------------------------------------------


def own_key(user, public_id):
    """An API key of the user's organization, for the console's key pages."""
    key = ApiKey.get_or_none(ApiKey.public_id == public_id, ApiKey.deleted_at.is_null())
    if key is None or key.organization_id != user.organization_id:
        raise NotFound("Not found.")
    return key
