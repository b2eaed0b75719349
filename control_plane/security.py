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


def configure(secret_key: str):
    global _pepper, _secret
    _secret = secret_key
    _pepper = hmac.new(secret_key.encode(), b"berth secret pepper v1", hashlib.sha256).digest()


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
    if _pepper is None:
        raise RuntimeError("security.configure() was not called")
    return hmac.digest(_pepper, secret.encode(), "sha256").hex()  # one C call: every request


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
