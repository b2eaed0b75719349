"""Signed URLs for the local backend: `{PUBLIC_URL}/storage/v1/<token>`.

The token (itsdangerous, CP_SECRET_KEY, a salt of its own) carries the operation,
the key, for a PUT the upload id, part number and a one-time nonce, and the
expiry. Whatever the request says besides the token is not trusted."""

import re
import secrets
import time

from itsdangerous import BadSignature, URLSafeSerializer

from control_plane.storage import check_key, check_part_number
from control_plane.vocabulary.errors import StorageUrlExpired, StorageUrlInvalid

SALT = "berth.storage.url.v1"
PATH = "/storage/v1/"
_HEX = re.compile(r"[0-9a-f]{32}")


def _serializer(secret):
    return URLSafeSerializer(secret, salt=SALT)


def sign(secret, *, op, key, expires, upload_id=None, part=None, filename=None):
    claims = {"op": op, "key": check_key(key), "exp": int(time.time()) + int(expires)}
    if op == "put":
        claims.update(upload=upload_id, part=check_part_number(part),
                      nonce=secrets.token_hex(16))
    elif filename:
        claims["filename"] = filename
    return _serializer(secret).dumps(claims)


def verify(secret, token, op):
    """The claims of a valid, unexpired token for `op`; raises the 403 errors."""
    try:
        claims = _serializer(secret).loads(token)
    except BadSignature:
        raise StorageUrlInvalid() from None
    if not isinstance(claims, dict) or claims.get("op") != op:
        raise StorageUrlInvalid()
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
        raise StorageUrlExpired()
    try:  # signed by us, so well-formed; checked again before any path is built
        check_key(claims["key"])
        if op == "put":
            check_part_number(claims["part"])
            if not (_HEX.fullmatch(claims["upload"]) and _HEX.fullmatch(claims["nonce"])):
                raise ValueError("bad upload id or nonce")
    except (KeyError, TypeError, ValueError):
        raise StorageUrlInvalid() from None
    return claims
