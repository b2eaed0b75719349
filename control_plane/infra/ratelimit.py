"""Rate limits, counted in shared storage: in-process memory by default,
Redis when CP_REDIS_URL is set (every web process then sees one count).

One mechanism serves the per-key limits and the per-target ones (metrics,
runtime logs, webhook mutations): `hit(limit, namespace, *ids)`."""

import logging
import math
import threading
import time
from collections import deque
from typing import NamedTuple

from limits import RateLimitItemPerMinute, storage, strategies
from limits.errors import StorageError
from limits.storage.memory import MemoryStorage

from control_plane.vocabulary.errors import RateLimited, TargetRateLimited

WINDOW_SECONDS = 60
log = logging.getLogger("berth.ratelimit")

# Fixed per key type (spec: not configurable).
PER_KEY = {
    "read_only": RateLimitItemPerMinute(120),
    "full_access": RateLimitItemPerMinute(20),
}


class WindowState(NamedTuple):  # built on every request: a tuple is the cheapest record
    limit: int
    remaining: int
    reset_in: int  # seconds until a slot frees


class _MemoryStorage(MemoryStorage):
    """limits' memory storage, its moving windows kept as each key's hit times
    (floats, oldest first) under one lock. limits' own keeps an object per hit and
    a lock per key, and searches the window on every hit: a list request's key hit
    cost ~20 µs of its ~370 µs of server CPU that way, ~2 this way. limits'
    strategies (test, get_window_stats, hit) read the same windows through
    acquire_entry and get_moving_window; its fixed-window counters are its own.

    A hit time counts while it is later than `now - expiry`. Keys whose last hit
    has left its window are dropped every SWEEP_SECONDS, on a hit: no thread."""

    SWEEP_SECONDS = 10.0

    def __init__(self):
        super().__init__()
        self._windows = {}  # key -> (hit times, oldest first; the key's expiry)
        self._lock = threading.Lock()
        self._swept_at = time.monotonic()

    def _window(self, key, now, expiry):
        """The key's hit times still in its window (the caller holds the lock)."""
        entry = self._windows.get(key)
        if entry is None:
            entry = self._windows[key] = (deque(), expiry)
        return self._trimmed(entry[0], now, expiry)

    @staticmethod
    def _trimmed(window, now, expiry):
        cutoff = now - expiry
        while window and window[0] <= cutoff:
            window.popleft()
        return window

    def _sweep(self, now):
        self._swept_at = time.monotonic()
        idle = [key for key, (window, expiry) in self._windows.items()
                if not window or window[-1] <= now - expiry]
        for key in idle:
            del self._windows[key]

    def hit_with_window(self, key, limit, expiry, amount=1):
        """acquire_entry and get_moving_window in one call under the lock: (allowed,
        the window's start, hits in the window)."""
        now = time.time()
        with self._lock:
            if time.monotonic() - self._swept_at >= self.SWEEP_SECONDS:
                self._sweep(now)
            window = self._window(key, now, expiry)
            allowed = len(window) + amount <= limit
            if allowed:
                window.extend([now] * amount)
            return allowed, (window[0] if window else now), len(window)

    def acquire_entry(self, key, limit, expiry, amount=1):
        return self.hit_with_window(key, limit, expiry, amount)[0]

    def get_moving_window(self, key, limit, expiry):
        now = time.time()
        with self._lock:  # a read: a key never hit gets no window
            entry = self._windows.get(key)
            window = self._trimmed(entry[0], now, expiry) if entry is not None else None
            return (window[0], len(window)) if window else (now, 0)

    def clear(self, key):
        with self._lock:
            self._windows.pop(key, None)
        super().clear(key)

    def reset(self):
        with self._lock:
            count = len(self._windows)
            self._windows.clear()
        return max(count, super().reset() or 0)


class RateLimiter:
    def __init__(self, redis_url=None):
        self.storage = (storage.storage_from_string(redis_url, wrap_exceptions=True)
                        if redis_url else _MemoryStorage())
        # A moving window: no double bursts at window edges.
        self.strategy = strategies.MovingWindowRateLimiter(self.storage)
        # With Redis away, each process counts on its own rather than failing the
        # request: limits then hold per process (looser by the number of web
        # processes) until Redis answers again.
        self._local = None
        self._warned_at = 0.0

    def hit(self, limit, namespace, *ids, error=RateLimited, code=None, message=None):
        """Count one request; raise `error` (a RateLimited, 429) when the window is full."""
        try:
            return self._hit(self.storage, self.strategy, limit, namespace, ids, error, code,
                             message)
        except StorageError as exc:
            return self._hit_locally(limit, namespace, ids, error, code, message, exc)

    def _hit_locally(self, limit, namespace, ids, error, code, message, exc):
        if self._local is None:
            local = _MemoryStorage()
            self._local = (local, strategies.MovingWindowRateLimiter(local))
        if time.monotonic() - self._warned_at > WINDOW_SECONDS:
            self._warned_at = time.monotonic()
            log.warning("rate-limit storage unreachable (%s); counting in this process",
                        exc.storage_error if hasattr(exc, "storage_error") else exc)
        return self._hit(*self._local, limit, namespace, ids, error, code, message)

    @staticmethod
    def _hit(store, strategy, limit, namespace, ids, error, code, message):
        if isinstance(store, _MemoryStorage):  # one call instead of two
            expiry = limit.get_expiry()
            allowed, start, count = store.hit_with_window(
                limit.key_for(namespace, *ids), limit.amount, expiry)
            reset_time, remaining = start + expiry, limit.amount - count
        else:
            allowed = strategy.hit(limit, namespace, *ids)
            reset_time, remaining = strategy.get_window_stats(limit, namespace, *ids)
        reset_in = max(1, math.ceil(reset_time - time.time()))
        state = WindowState(limit.amount, max(0, remaining), reset_in)
        if not allowed:
            raise error(reset_in, message, code=code, headers=headers_for(state))
        return state

    def window(self, limit, namespace, *ids):
        """The window's state, counting nothing (a refused key's headers)."""
        try:
            reset_time, remaining = self.strategy.get_window_stats(limit, namespace, *ids)
        except StorageError:  # as `hit` does: this process's own count meanwhile
            if self._local is None:
                return WindowState(limit.amount, limit.amount, WINDOW_SECONDS)
            reset_time, remaining = self._local[1].get_window_stats(limit, namespace, *ids)
        return WindowState(limit.amount, max(0, remaining),
                           max(1, math.ceil(reset_time - time.time())))

    def hit_all(self, hits, *, error=RateLimited, code=None):
        """A slot of every (limit, namespace, ids, message) or of none: all are
        tested first, and the first full one raises RateLimited with its message."""
        for limit, namespace, ids, message in hits:
            try:
                free = self.strategy.test(limit, namespace, *ids)
            except StorageError:
                free = True  # `hit` below counts in this process instead
            if not free:
                self.hit(limit, namespace, *ids, error=error, code=code, message=message)  # raises
        for limit, namespace, ids, message in hits:
            self.hit(limit, namespace, *ids, error=error, code=code, message=message)

    def hit_target(self, limit, namespace, *ids):
        """Per-target limits (per environment, server, organization): 429 `target_rate_limit`."""
        return self.hit(limit, namespace, *ids, error=TargetRateLimited,
                        message="Too many requests for this target.")

    def reset(self):
        self.storage.reset()


def header_items(state: WindowState):
    return [("X-RateLimit-Limit", str(state.limit)),
            ("X-RateLimit-Remaining", str(state.remaining)),
            ("X-RateLimit-Window", _WINDOW_TEXT)]


_WINDOW_TEXT = str(WINDOW_SECONDS)


def headers_for(state: WindowState):
    return dict(header_items(state))
