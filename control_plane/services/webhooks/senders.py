"""The sending threads of outgoing webhooks, shared by every delivery loop of the
process: at most MAX_SENDS requests at once in total and MAX_PER_RECEIVER to one
receiver (scheme-less `host:port` of the URL). A receiver's jobs beyond its share
wait in its own queue, so a slow receiver holds MAX_PER_RECEIVER threads and never
all of them. Each job's outcome goes to the `Inbox` of the loop that submitted it.

The connection pools of `net` keep MAX_PER_RECEIVER connections per checked
address, so every send at the bound finds a kept-alive connection."""

import collections
import threading
from concurrent.futures import ThreadPoolExecutor

MAX_SENDS = 16
MAX_PER_RECEIVER = 4
RUN_LENGTH = 16  # jobs of one receiver a thread sends in a row


class Inbox:
    """The outcomes of one loop's jobs, in the order they finished."""

    def __init__(self):
        self._cv = threading.Condition()
        self._done = []
        self.pending = 0  # submitted, outcome not yet taken
        self.paused = set()  # webhooks paused meanwhile: their waiting jobs are not sent

    def _put(self, outcome):
        with self._cv:
            self._done.append(outcome)
            self._cv.notify()

    def take(self, at_least=1, timeout=None):
        """The outcomes finished so far, after waiting up to `timeout` seconds for
        `at_least` of them (fewer when fewer are pending)."""
        with self._cv:
            want = min(at_least, self.pending)
            if want and len(self._done) < want:
                self._cv.wait_for(lambda: len(self._done) >= want, timeout)
            done, self._done = self._done, []
            self.pending -= len(done)
            return done


class Senders:
    def __init__(self, max_sends=MAX_SENDS, per_receiver=MAX_PER_RECEIVER):
        self.per_receiver = per_receiver
        self._pool = ThreadPoolExecutor(max_sends, thread_name_prefix="berth-webhook")
        self._lock = threading.Lock()
        self._active = collections.Counter()  # receiver -> sends under way
        self._waiting = {}  # receiver -> deque of (call, inbox)

    def submit(self, receiver, call, inbox):
        """Run `call()` (which must not raise) when the receiver has a free slot;
        its return value goes to `inbox`."""
        with self._lock:
            inbox.pending += 1
            if self._active[receiver] >= self.per_receiver:
                self._waiting.setdefault(receiver, collections.deque()).append((call, inbox))
                return
            self._active[receiver] += 1
        self._start(receiver, call, inbox)

    def _start(self, receiver, call, inbox):
        self._pool.submit(self._run, receiver, call, inbox)

    def _run(self, receiver, call, inbox):
        # A thread works through a few of the receiver's queued jobs (no hand-off
        # per job), then queues itself again behind other receivers' work.
        for _ in range(RUN_LENGTH):
            inbox._put(call())
            with self._lock:
                queue = self._waiting.get(receiver)
                if not queue:
                    self._waiting.pop(receiver, None)
                    self._active[receiver] -= 1
                    if not self._active[receiver]:
                        del self._active[receiver]
                    return
                call, inbox = queue.popleft()
        self._start(receiver, call, inbox)


_senders, _senders_lock = None, threading.Lock()


def shared():
    """The process's senders (created on first use)."""
    global _senders
    with _senders_lock:
        if _senders is None:
            _senders = Senders()
        return _senders
