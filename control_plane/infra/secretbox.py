"""Secrets the server must read back (e.g. a key for computing HMACs), stored
encrypted: Fernet (AES-128-CBC with HMAC-SHA256) under a key derived from
CP_SECRET_KEY, one key per purpose. Changing CP_SECRET_KEY makes them unreadable."""

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken

from control_plane.infra import security


def _fernet(purpose):
    return Fernet(base64.urlsafe_b64encode(security.derived_key(f"secretbox:{purpose}")))


def seal(plaintext: str, purpose: str) -> str:
    return _fernet(purpose).encrypt(plaintext.encode()).decode("ascii")


def unseal(token: str, purpose: str) -> str | None:
    """The plaintext, or None when the token was sealed under another key or purpose."""
    try:
        return _fernet(purpose).decrypt(token.encode("ascii")).decode()
    except (InvalidToken, ValueError):
        return None


def unseal_cached(token: str, purpose: str) -> str | None:
    """`unseal`, without decrypting the same sealed value again (a sender reads it on
    every delivery). The sealing key is part of the cache key: a changed
    CP_SECRET_KEY is never answered from the cache."""
    return _unseal_cached(token, purpose, security.derived_key(f"secretbox:{purpose}"))


@functools.lru_cache(maxsize=2048)
def _unseal_cached(token, purpose, _key):
    return unseal(token, purpose)
