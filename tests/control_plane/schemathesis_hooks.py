"""Loaded by `st run` (SCHEMATHESIS_HOOKS): a fresh credential on every request.

The per-key rate limits are fixed by the spec (120 / 20 requests a minute), so a
fuzzer on one key would mostly test the 429 path. The keys come from files named
in the environment, never from argv: GETs rotate over read-only keys, other
methods over full-access ones (or user tokens on /api/v1, one file for both)."""

import itertools
import os
import threading

import schemathesis


def _cycle(variable):
    with open(os.environ[variable]) as fh:
        return itertools.cycle(fh.read().split())


_lock = threading.Lock()
_reads = _cycle("BERTH_FUZZ_READ_KEYS")
_writes = _cycle("BERTH_FUZZ_WRITE_KEYS")


@schemathesis.auth(refresh_interval=None)
class RotatingBearer:
    def get(self, case, ctx):
        with _lock:
            return next(_reads if case.method.upper() == "GET" else _writes)

    def set(self, case, data, ctx):
        case.headers = case.headers or {}
        case.headers["Authorization"] = f"Bearer {data}"


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """Idempotency keys drawn by the fuzzer repeat ("0", "00"...). A repeat on the
    same operation replays it (rule 3, as documented); one first used on another
    operation replays that one's response (rule 5), which its create schema does not
    describe. Keys are made per operation, so each operation's own behaviour is tested."""
    headers = case.headers or {}
    key = headers.get("X-Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key.strip()) <= 200:
        headers["X-Idempotency-Key"] = f"{case.method}:{case.operation.path}:{key}"[-255:]
