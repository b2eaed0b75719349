"""What an operator watches: Prometheus metrics and structured logs, the same on
every process kind (`serve`, `web`, `gateway`, `scheduler`).

Metrics live in prometheus-client's default registry (which also carries the
process's CPU, memory and garbage-collection figures). `/metrics` is a route of the
HTTP app; the gateway and the scheduler, which serve no HTTP, expose the same text
on their own `--metrics HOST:PORT`. Figures that live in the database (the
agent-command queue, the webhook backlog) are read when scraped, not kept here:
each replica reports the same shared queue, so sum over instances only what is
this process's own (requests, streams, job runs)."""

import collections
import json
import logging
import random
import re
import sys
import threading
import time

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

HTTP_REQUESTS = Counter("berth_http_requests", "HTTP requests answered",
                        ["method", "route", "status"])
HTTP_LATENCY = Histogram("berth_http_request_duration_seconds",
                         "Time from the request's arrival in the app to its answer",
                         ["method", "route"],
                         buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
AGENTS_CONNECTED = Gauge("berth_gateway_agents_connected",
                         "Agent streams this gateway process holds")
AGENT_WAKEUPS = Counter("berth_gateway_wakeups",
                        "Wake-ups (new commands) for streams this gateway holds, by where "
                        "they came from: this process, the Redis relay, or the database poll",
                        ["via"])
JOB_RUNS = Counter("berth_scheduler_job_runs", "Scheduler job runs", ["job", "outcome"])
JOB_DURATION = Histogram("berth_scheduler_job_duration_seconds", "Scheduler job run time",
                         ["job"], buckets=(.01, .05, .1, .5, 1, 5, 10, 30, 60, 300))
SHELL_SESSIONS = Counter("berth_shell_sessions", "Shell sessions opened through this process, "
                         "by how the agent's bytes came: its own socket or its stream",
                         ["via"])
WEBHOOK_ATTEMPTS = Counter("berth_webhook_delivery_attempts",
                           "Webhook delivery attempts made by this process", ["outcome"])


_BACKLOG_GAUGES = (  # metric, snapshot key, help
    ("berth_agent_commands_pending", "commands_pending",
     "Agent commands not yet acknowledged by their agent"),
    ("berth_agent_command_oldest_age_seconds", "commands_oldest_age_seconds",
     "Age of the oldest agent command not yet acknowledged"),
    ("berth_webhook_deliveries_pending", "webhooks_pending",
     "Webhook deliveries waiting for an attempt or a retry"),
    ("berth_webhook_deliveries_failed", "webhooks_failed",
     "Webhook deliveries that gave up after their last attempt"),
)


class BacklogCollector:
    """The shared queues, read at scrape time by `snapshot()`: a dict with
    commands_pending, commands_oldest_age_seconds, webhooks_pending, webhooks_failed."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def describe(self):
        return []  # no test collect at registration: that would query the database

    def collect(self):
        try:
            s = self.snapshot()
        except Exception:  # a scrape must answer even with the database away
            logging.getLogger("berth").warning("reading the backlog for /metrics failed",
                                               exc_info=True)
            return
        for name, key, text in _BACKLOG_GAUGES:
            yield GaugeMetricFamily(name, text, value=s[key])


_backlog = None


def watch_backlog(snapshot):
    """Registers the backlog gauges once per process (several apps in one process,
    as in the tests, share it)."""
    global _backlog
    if _backlog is None:
        _backlog = BacklogCollector(snapshot)
        REGISTRY.register(_backlog)


def timed_job(name, run):
    started = time.perf_counter()
    try:
        result = run()
    except Exception:
        JOB_RUNS.labels(name, "failed").inc()
        raise
    finally:
        JOB_DURATION.labels(name).observe(time.perf_counter() - started)
    JOB_RUNS.labels(name, "ok").inc()
    return result


# --- request ids and logs -------------------------------------------------

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")


def request_id(incoming):
    """A client's own X-Request-Id when it is a plain token (a balancer's, a
    client's retry), else a new one; never text that could forge a log line."""
    if incoming and _CLIENT_ID.fullmatch(incoming):
        return incoming
    # Unique, not secret: uuid4 reads the OS's random source, a system call that
    # hands the interpreter lock to another thread on every request.
    return f"{random.getrandbits(128):032x}"


_REQUEST_METRICS = {}  # (method, route, status) -> the two labelled series


def observe_request(method, route, status, seconds):
    """Count an answered request and its time (labels looked up once per route)."""
    series = _REQUEST_METRICS.get((method, route, status))
    if series is None:
        series = _REQUEST_METRICS[method, route, status] = (
            HTTP_REQUESTS.labels(method, route, status), HTTP_LATENCY.labels(method, route))
    series[0].inc()
    series[1].observe(seconds)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the process kind, and
    whatever the record carries in `extra` (request_id, method, route, status...)."""

    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def format(self, record):
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
                 "level": record.levelname.lower(), "logger": record.name,
                 "message": record.getMessage(), "process": self.kind}
        entry.update({k: v for k, v in vars(record).items() if k not in self._STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class BatchedStreamHandler(logging.StreamHandler):
    """A stream handler that writes the access lines (`batched`'s INFO records: one
    per request) in batches, at most `interval` seconds after they were logged;
    any other record is written at once, with everything logged before it, in
    order. At exit logging's own shutdown flushes what is left.

    Written line by line, every request's access line was a write with the
    interpreter lock released and the handler's lock held: on a busy server each
    one handed the interpreter lock to another thread, and the worker threads
    queued on the handler's lock. A batch is one write for many lines, from a
    thread of its own woken once per batch, not once per line."""

    def __init__(self, stream=None, interval=0.1, batched="berth.access"):
        super().__init__(stream)
        self.interval, self.batched = interval, batched
        self._lines, self._closed = [], False
        self._batches = collections.deque()
        self._pending = threading.Event()
        self._writing = threading.Lock()
        threading.Thread(target=self._run, name="berth-log", daemon=True).start()

    def emit(self, record):  # called with the handler's lock held (Handler.handle)
        try:
            self._lines.append(self.format(record) + self.terminator)
        except Exception:
            self.handleError(record)
            return
        if record.levelno > logging.INFO or record.name != self.batched:
            self.flush()
        elif not self._pending.is_set():
            self._pending.set()

    def flush(self):
        # The lines are taken under the handler's lock and queued as a batch; the
        # batches go out in the order taken, under a lock of their own that is
        # never held while waiting for the handler's (no deadlock with `emit`).
        self.acquire()
        try:
            if self._lines:
                self._batches.append(self._lines)
                self._lines = []
        finally:
            self.release()
        with self._writing:
            while self._batches:
                lines = self._batches.popleft()
                if self.stream is None:
                    continue
                try:
                    self.stream.write("".join(lines))
                    self.stream.flush()
                except (OSError, ValueError):
                    pass  # a closed stream: nowhere to write (as at exit)

    def close(self):
        self._closed = True
        self._pending.set()  # the writer thread ends
        self.flush()
        super().close()

    def _run(self):
        while not self._closed:
            self._pending.wait()
            time.sleep(self.interval)
            self._pending.clear()
            self.flush()


def configure_logging(kind, level=logging.INFO):
    """Structured logs on stderr for the `berth` loggers of a server process."""
    handler = BatchedStreamHandler(sys.stderr)
    formatter = JsonFormatter(kind)
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger("berth")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
