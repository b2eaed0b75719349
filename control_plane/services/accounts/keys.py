"""API keys: created by operators, shown once, stored as a keyed digest."""

import functools
import secrets
from contextvars import ContextVar

from peewee import SQL, Cast, fn

from control_plane.infra import clock, security
from control_plane.infra.compiled import Compiled
from control_plane.infra.db import database
from control_plane.models import ApiKey, Organization, Project, User
from control_plane.models.api_key import FULL_ACCESS, KEY_PREFIX, ORG_SCOPE, PROJECT_SCOPE
from control_plane.services import audit
from control_plane.vocabulary.errors import (
    BadRequest,
    InvalidApiKey,
    KeyActive,
    KeyExpired,
    KeyHasNoOwner,
    KeyRevoked,
    MissingApiKey,
    NotFound,
    WriteAccessRequired,
)
from control_plane.vocabulary.states import KeyStatus


def create_key(org_id, name, key_type, scope, project_id=None, expires_at=None,
               server_registration=False, support_tickets=False, owner_id=None):
    """Returns (ApiKey, full key). The full key exists only in this return value."""
    if key_type not in KEY_PREFIX:
        raise BadRequest(f"type must be one of {', '.join(KEY_PREFIX)}")
    if scope not in (ORG_SCOPE, PROJECT_SCOPE):
        raise BadRequest("scope must be organization or project")
    if (scope == PROJECT_SCOPE) != (project_id is not None):
        raise BadRequest("a project-scoped key needs --project, and only it")
    with database.atomic():
        org = Organization.get_or_none(Organization.id == org_id)
        if org is None:
            raise NotFound("organization not found")
        if project_id is not None and not Project.select().where(
                Project.id == project_id, Project.organization == org,
                Project.deleted_at.is_null()).exists():
            raise NotFound("project not found in that organization")
        if owner_id is not None and not User.select().where(
                User.id == owner_id, User.organization == org, User.deleted_at.is_null()).exists():
            raise NotFound("owner not found in that organization")
        if scope == PROJECT_SCOPE and server_registration:
            raise BadRequest("server registration needs an organization-scoped key")
        if scope == PROJECT_SCOPE and support_tickets:
            raise BadRequest("support tickets need an organization-scoped key")
        raw = KEY_PREFIX[key_type] + security.random_token(40)
        key = ApiKey.create(
            public_id="key_" + secrets.token_hex(8),
            organization=org, name=name, key_type=key_type, scope=scope,
            project=project_id, prefix=raw[:16], key_hash=security.digest(raw),
            server_registration=server_registration, support_tickets=support_tickets,
            owner=owner_id, expires_at=expires_at,
        )
        audit.record(org.id, "api_key.create", "api_key", key.public_id, {
            "name": name, "key_type": key_type, "scope": scope, "project_id": project_id,
            "expires_at": expires_at, "server_registration": server_registration,
            "support_tickets": support_tickets, "owner_id": owner_id})
    return key, raw


def presented_key(authorization, x_api_key):
    """The key a request carries. `Authorization: Bearer` wins over `X-API-Key`."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise InvalidApiKey("Authorization must be 'Bearer <API key>'.")
        return value.strip()
    if x_api_key is not None:
        return x_api_key.strip()
    raise MissingApiKey("Pass an API key as 'Authorization: Bearer <key>' or 'X-API-Key'.")


# Runs on every request: compiled once (see compiled.Compiled), only the columns auth uses.
_BY_DIGEST = Compiled(lambda digest, shape: ApiKey.select(
    ApiKey.id, ApiKey.public_id, ApiKey.name, ApiKey.organization, ApiKey.key_type, ApiKey.scope,
    ApiKey.project, ApiKey.server_registration, ApiKey.support_tickets, ApiKey.owner,
    ApiKey.expires_at, ApiKey.revoked_at, ApiKey.deleted_at).where(ApiKey.key_hash == digest))


def fingerprint_query(digest):
    """What of a key's row can change (revocation, deletion, and anything an
    operator may alter: type, scope, capabilities, owner, expiry) as one text,
    compared with what it was when the key was remembered. A scalar query: it
    runs on its own or as a column of another statement (see KeyCache.get)."""
    # Separators as SQL literals: compiled.Compiled takes every parameter for a marker.
    parts = [fn.COALESCE(Cast(column, "TEXT"), SQL("'~'")) for column in (
        ApiKey.key_type, ApiKey.scope, ApiKey.project, ApiKey.server_registration,
        ApiKey.support_tickets, ApiKey.owner, ApiKey.expires_at, ApiKey.revoked_at,
        ApiKey.deleted_at)]
    return ApiKey.select(functools.reduce(lambda a, b: a.concat(SQL("'|'")).concat(b), parts)) \
        .where(ApiKey.key_hash == digest)


_FINGERPRINT = Compiled(lambda digest, shape: fingerprint_query(digest))


def _fingerprint(digest):
    row = _FINGERPRINT.row(digest)
    return row[0] if row is not None else None


# A request's remembered key whose row it has not re-read yet: (cache, digest, seen).
_UNCHECKED = ContextVar("berth_unchecked_key", default=None)


class KeyCache:
    """Keys that authenticated, by digest, so that a request spends one small read
    on its key instead of loading and building it. Every hit still reads the key's
    row as it is now (any process may have revoked, deleted or changed it) and
    checks its expiry against the clock, so the cache cannot outlive a change: it
    saves work, never a check. Bounded: emptied when full.

    A read-only request may `defer` that read: the list it asks for then reads the
    row in the page's own statement (scope.scoped_page), and `confirm` compares
    it before the answer leaves; nothing is answered on a key not read as it is."""

    MAX = 4096

    def __init__(self):
        self._keys = {}

    def get(self, digest, *, defer=False):
        entry = self._keys.get(digest)
        if entry is None:
            return None
        key, seen = entry
        if key.expires_at is not None and key.expires_at <= clock.now():
            self._keys.pop(digest, None)  # the full lookup says why it fails
            return None
        if defer:
            _UNCHECKED.set((self, digest, seen))
        elif _fingerprint(digest) != seen:
            self._keys.pop(digest, None)  # the full lookup says why it fails, or reloads
            return None
        return key

    def seen(self, digest):
        """Read before the key is loaded: a change between the two reads then
        shows as a difference on the next hit, never as a stale key kept."""
        return _fingerprint(digest)

    def forget(self, digest):
        self._keys.pop(digest, None)

    def put(self, digest, key, seen):
        if len(self._keys) >= self.MAX:
            self._keys.clear()
        self._keys[digest] = (key, seen)


_CHANGED = "changed"  # what _UNCHECKED holds once a re-read found the key changed


def unchecked_digest():
    """The digest of this request's key while its row is still to be re-read."""
    pending = _UNCHECKED.get()
    return pending[1] if isinstance(pending, tuple) else None


def settle(fingerprint):
    """The deferred check, with the key row's fingerprint as another statement read it."""
    pending = _UNCHECKED.get()
    if isinstance(pending, tuple):
        cache, digest, seen = pending
        if fingerprint == seen:
            _UNCHECKED.set(None)
        else:
            cache.forget(digest)
            _UNCHECKED.set(_CHANGED)


def confirm():
    """False when this request's key changed since the cache remembered it (its
    row re-read now, unless a statement of the request already read it): the
    request must authenticate again. Ends the request's deferred check."""
    pending = _UNCHECKED.get()
    if isinstance(pending, tuple):
        settle(_fingerprint(pending[1]))
        pending = _UNCHECKED.get()
    _UNCHECKED.set(None)
    return pending is None


def forget_unchecked():
    """At a request's start and end: a worker thread's next request starts clean."""
    _UNCHECKED.set(None)


def authenticate(raw, cache=None, *, defer=False):
    """The active key for a presented secret, or a 401 saying why not.

    The lookup is by digest: timing reveals nothing about stored keys. The key
    returned may be shared with other requests (via `cache`): read it only.
    `defer`: see KeyCache."""
    if not raw.startswith(tuple(KEY_PREFIX.values())) or len(raw) > 128:
        raise InvalidApiKey()
    digest = security.digest(raw)
    key = cache.get(digest, defer=defer) if cache is not None else None
    if key is not None:
        return key
    seen = cache.seen(digest) if cache is not None else None
    rows = _BY_DIGEST.dicts(ApiKey, digest)
    key = ApiKey(**rows[0]) if rows else None
    if key is None or key.deleted_at is not None or not raw.startswith(KEY_PREFIX[key.key_type]):
        raise InvalidApiKey()
    if key.revoked_at is not None:
        raise _naming(KeyRevoked("The API key was revoked."), key)
    if key.expires_at is not None and key.expires_at <= clock.now():
        raise _naming(KeyExpired("The API key has expired."), key)
    if cache is not None and seen is not None:
        cache.put(digest, key, seen)
    return key


def _naming(error, key):
    """A refusal of a key that exists (revoked, expired) carries it: its answer
    still names the key and shows its window (api/auth.py)."""
    error.key = key
    return error


def authorize_method(key, method):
    """Read-only keys may only read; writes need a key whose creator still exists."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return
    if key.key_type != FULL_ACCESS:
        raise WriteAccessRequired()
    if key.owner_id is not None:
        owner = User.get_or_none(User.id == key.owner_id)
        if owner is None or owner.deleted_at is not None:
            raise KeyHasNoOwner("The user who created this key no longer exists. Rotate the key.")


def status_of(key):
    if key.revoked_at is not None:
        return KeyStatus.REVOKED
    if key.expires_at is not None and key.expires_at <= clock.now():
        return KeyStatus.EXPIRED
    return KeyStatus.ACTIVE


def list_keys(org_id):
    return list(ApiKey.select().where(ApiKey.organization == org_id, ApiKey.deleted_at.is_null())
                .order_by(ApiKey.created_at, ApiKey.id))


def _get(public_id):
    key = ApiKey.get_or_none(ApiKey.public_id == public_id, ApiKey.deleted_at.is_null())
    if key is None:
        raise NotFound("key not found")
    return key


def revoke_key(public_id):
    with database.atomic():
        key = _get(public_id)
        if key.revoked_at is None:
            key.revoked_at = clock.now()
            key.save(only=[ApiKey.revoked_at])
            audit.record(key.organization_id, "api_key.revoke", "api_key", key.public_id)


def delete_key(public_id):
    """Only revoked or expired keys can be deleted: an active key is revoked first."""
    with database.atomic():
        key = _get(public_id)
        if status_of(key) == KeyStatus.ACTIVE:
            raise KeyActive("revoke the key before deleting it")
        key.deleted_at = clock.now()
        key.save(only=[ApiKey.deleted_at])
        audit.record(key.organization_id, "api_key.delete", "api_key", key.public_id)
