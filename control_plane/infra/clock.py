"""The one source of "now" for the control plane: naive UTC datetimes.

Tests replace the source to move time (idempotency expiry, key expiry)."""

import datetime as dt

_source = None


def now() -> dt.datetime:
    if _source is not None:
        return _source()
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def set_source(fn):
    """Install a callable returning naive UTC datetimes; None restores the wall clock."""
    global _source
    _source = fn
