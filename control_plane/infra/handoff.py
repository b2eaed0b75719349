"""Calls from other threads run on an event loop, many to a wake-up.

`loop.call_soon_threadsafe` writes to the loop's self-pipe on every call: with a
thousand keystrokes a second crossing between the HTTP server's loop and the
gateway's, those writes (and the wake-ups they cause) were the largest cost of a
shell session's bytes. A Handoff queues the calls and writes once until the loop
has run them, in the order they came."""

import collections
import threading
import weakref


class Handoff:
    def __init__(self, loop):
        self.loop = loop
        self.calls = collections.deque()
        self.lock = threading.Lock()
        self.scheduled = False

    def call(self, fn, *args):
        """(From any thread.) `fn(*args)` soon on the loop."""
        with self.lock:
            self.calls.append((fn, args))
            if self.scheduled:
                return
            self.scheduled = True
        self.loop.call_soon_threadsafe(self._run)

    def _run(self):
        with self.lock:
            calls, self.calls = self.calls, collections.deque()
            self.scheduled = False
        for fn, args in calls:
            fn(*args)


_of_loop = weakref.WeakKeyDictionary()  # a loop closed and dropped takes its own


def of(loop):
    """The loop's Handoff (one per loop, made at first use)."""
    handoff = _of_loop.get(loop)
    if handoff is None:
        handoff = _of_loop.setdefault(loop, Handoff(loop))
    return handoff
