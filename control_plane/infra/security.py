"""Secrets: generation, keyed hashing (pepper from CP_SECRET_KEY), comparison.

Stored secrets (API keys, user tokens, registration tokens) are kept only as
HMAC-SHA256 digests; a stolen database alone does not reveal usable keys."""

import hashlib
import hmac
import secrets
import string

from itsdangerous import URLSafeSerializer

_ALPHABET = string.ascii_letters + string.digits
_pepper = None
_secret = None
_keyed = None  # HMAC-SHA256 keyed with the pepper, before any message: copied per digest


def configure(secret_key: str):
    global _pepper, _secret, _keyed
    _secret = secret_key
    _pepper = hmac.new(secret_key.encode(), b"berth secret pepper v1", hashlib.sha256).digest()
    _keyed = hmac.new(_pepper, digestmod=hashlib.sha256)


def signer(purpose: str) -> URLSafeSerializer:
    """Signs small payloads (cursors, URLs) for one purpose; another purpose's
    signature does not verify."""
    return URLSafeSerializer(_secret, salt=f"berth:{purpose}")


def derived_key(purpose: str) -> bytes:
    """32 bytes derived from CP_SECRET_KEY for one purpose (another purpose, another key)."""
    if _secret is None:
        raise RuntimeError("security.configure() was not called")
    return hmac.new(_secret.encode(), f"berth key v1:{purpose}".encode(), hashlib.sha256).digest()


def random_token(length=40):
    """Alphanumeric (copy-paste friendly), ~238 bits at the default length."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def digest(secret: str) -> str:
    """HMAC-SHA256 of `secret` under the pepper, in hex (every API request has one).
    A copy of the keyed object, not `hmac.digest`: that one releases the interpreter
    lock around its OpenSSL call, and on a busy server each release hands the lock
    to another thread and waits to get it back (~30-60 us, against ~1 us)."""
    if _keyed is None:
        raise RuntimeError("security.configure() was not called")
    mac = _keyed.copy()
    mac.update(secret.encode())
    return mac.hexdigest()


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
