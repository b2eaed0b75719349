"""`berth-agent run`: keep one gRPC stream to the gateway, execute its
commands, answer its live requests, heartbeat with host metrics, report the
environments' disk usage periodically, and come back with exponential
backoff and jitter after any drop."""

import json
import logging
import os
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from agent import __version__, commands, live, upgrade_guard
from agent.facts import host_facts
from agent.journal import CommandJournal
from agent.mail import kept_port
from agent.status import StatusFile, now_iso
from protocol import wire
from protocol.kinds import DISK_CHANGING
from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc

log = logging.getLogger("berth.agent")
SAMPLE_S = 60.0  # the environments' figures in heartbeats: once a minute
WAL_PASS_SECONDS = 5  # how often archived WAL waiting in the spools is looked for
SAMPLE_SLACK_S = 5.0  # heartbeats drift: one due within this is taken
SAMPLE_MAX_AGE_S = 300.0  # CPU since the previous sample, if it is younger than this

BACKOFF_BASE, BACKOFF_CAP = 1.0, 30.0
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 60_000),  # pings keep NAT and proxies from dropping us
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
_END = object()
INTERRUPTED = "interrupted by an agent restart; not run again"
PROXY_WATCH_SECONDS = 10
FIGURES = ("database_bytes", "filestore_bytes", "addons_bytes")


def backoff(attempt):
    """Full jitter: uniform in [0, min(cap, base * 2^attempt)]."""
    # The exponent is bounded: 2.0 ** 1024 overflows after some hours of failed retries.
    return random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempt, 32)))


class Host:
    """What command handlers and live requests use of the agent: its configuration,
    data dir, the container engine, the proxy and the samplers, each made when
    first needed. The daemon is one; `berth-agent exec` over SSH another."""

    over_ssh = False  # live container metrics: states only (the spec's SSH rows)

    def mail_catcher(self):
        """Over SSH, none: there is no resident process to take mail (agent/mail/)."""
        return None

    def __init__(self, config, data_dir, docker_client=None):
        self.config = config
        self.data_dir = Path(data_dir)
        self.docker_client = docker_client
        self._proxy = None
        self._host = None
        self._containers = None
        self._beat_containers = None

    def docker(self):
        if self.docker_client is None:
            import docker

            from agent.errors import engine_errors

            with engine_errors():  # an engine that is down answers engine_unreachable
                self.docker_client = docker.from_env(timeout=20)
        return self.docker_client

    def proxy(self):
        if self._proxy is None:
            from agent.proxy.proxy import Proxy

            self._proxy = Proxy(self.docker(), self.data_dir / "proxy")
        return self._proxy

    def host_sampler(self):
        if self._host is None:
            from agent.metrics.host import HostSampler

            self._host = HostSampler()  # counts containers without docker-py; disk of disk_path()
        return self._host

    def beat_sampler(self):
        """The heartbeats' own container sampler: cgroup files only (no docker-py),
        CPU between one heartbeat and the next."""
        if self._beat_containers is None:
            from agent.metrics.containers import ContainerMetrics

            self._beat_containers = ContainerMetrics(None, max_age=SAMPLE_MAX_AGE_S)
        return self._beat_containers

    def container_sampler(self):
        if self._containers is None:
            from agent.metrics.containers import ContainerMetrics

            self._containers = ContainerMetrics(self.docker())
        return self._containers


class Agent(Host):
    def __init__(self, config, data_dir, docker_client=None):
        super().__init__(config, data_dir, docker_client)
        self.journal = CommandJournal(data_dir / "commands.json")
        # We may be the new version of an upgrade: its command is finished at our
        # welcome (or by the old version's guard), not interrupted.
        self.upgrade = upgrade_guard.pending(data_dir)
        interrupted = self.journal.interrupt_unfinished(
            INTERRUPTED, keep=(self.upgrade["command_id"],) if self.upgrade else ())
        if interrupted:
            log.warning("commands interrupted by the last stop, reported failed: %s",
                        ", ".join(interrupted))
        self.status = StatusFile(data_dir / "status.json", control_plane=config.control_plane,
                                 grpc_address=config.grpc_address, server_id=config.server_id,
                                 version=__version__)
        self.pool = ThreadPoolExecutor(4, thread_name_prefix="berth-agent")
        self.stop = threading.Event()
        self.restarting = False  # an upgrade is restarting us: no new command starts
        self._starting = threading.Lock()
        self._disk = None  # the latest DiskReport, sent again on each new stream
        # Set by a finished deploy or restore (and by shutdown): the disk is measured
        # now rather than at the end of its interval, so a new environment's figures
        # show within seconds, not 15 minutes.
        self._measure_disk = threading.Event()
        self._proxy_report = None  # likewise the latest ProxyReport
        self._outbox = _closed_queue()  # the current stream's, once there is one
        self._catcher, self._catcher_lock = None, threading.Lock()

    # --- connection loop -------------------------------------------------

    def run_forever(self):
        if kept_port(self.data_dir):  # ERPs here were configured with its port
            self.mail_catcher()
        self._start_disk_meter()
        self._resume_restores()
        self._start_proxy_watch()
        self._start_wal_shipper()
        attempt = 0
        while not self.stop.is_set():
            established = self._session()
            attempt = 0 if established else attempt + 1
            # "Disconnected since" is when the connection was lost (or first failed),
            # not the latest failed retry.
            if established or self.status.state["since"] is None:
                self.status.update(connected=False, since=now_iso())
            self.stop.wait(backoff(attempt))

    def _session(self):
        """One stream, until it drops. Returns whether the gateway welcomed us."""
        outbox = self._outbox = queue.Queue()
        welcomed, shells = False, None
        address = self.config.grpc_address
        try:
            with channel_with_options(address, self.config.grpc_tls) as ch:
                stub = pb_grpc.AgentGatewayStub(ch)
                outbox.put(pb.AgentMessage(hello=pb.Hello(facts=host_facts(),
                                                          revision=wire.REVISION)))
                stream = stub.Connect(_drain(outbox), metadata=[
                    ("authorization", f"Bearer {self.config.credential}")])
                self._stream = stream
                for message in stream:
                    kind = message.WhichOneof("body")
                    if kind == "welcome":
                        if refused := wire.gateway_too_old(message.welcome):
                            log.error("not working with %s: %s", address, refused)
                            self.status.error(refused)
                            stream.cancel()
                            return False
                        if self.upgrade is not None and not self._commit_upgrade():
                            stream.cancel()
                            return False
                        welcomed = True
                        self.status.update(connected=True, since=now_iso(), last_error=None)
                        self._start_heartbeats(outbox, message.welcome.heartbeat_seconds)
                        if self._disk is not None:
                            outbox.put(pb.AgentMessage(disk=self._disk))
                        if self._proxy_report is not None:
                            outbox.put(pb.AgentMessage(proxy=self._proxy_report))
                    elif kind == "command":
                        self.pool.submit(self._execute, outbox, message.command)
                    elif kind == "request":
                        self.pool.submit(self._answer, outbox, message.request)
                    elif kind == "shell_open":
                        shells = shells or self._shells(outbox)
                        shells.open(message.shell_open)
                    elif kind == "shell" and shells is not None:
                        shells.input(message.shell)
                    if self.stop.is_set():
                        stream.cancel()
        except grpc.RpcError as exc:
            if not self.stop.is_set():
                self.status.error(f"{exc.code().name}: {exc.details()}")
                log.warning("stream to %s ended: %s", address, exc.details())
            if exc.code() == grpc.StatusCode.UNAVAILABLE and exc.details() == wire.DRAINING:
                welcomed = True  # not a failure: again at once, to another gateway
        finally:
            outbox.put(_END)
            if shells is not None:  # nobody reads them any more: hung up
                shells.close_all()
        return welcomed

    def _shells(self, outbox):
        """This stream's shell sessions (agent/shell.py, loaded at the first one)."""
        from agent.shell import Shells

        return Shells(self, outbox.put, outbox.qsize)

    def _commit_upgrade(self):
        """The gateway welcomed the new version of an upgrade: it stays. False when
        the old version's guard is already rolling back (then we stop)."""
        if upgrade_guard.commit(self.journal, self.data_dir, self.upgrade):
            log.info("upgraded from %s to %s", self.upgrade["from_version"], __version__)
            self.upgrade = None
            return True
        log.error("upgrade rolled back by the previous version; stopping")
        self.shutdown()
        return False

    def restart_into(self, switch):
        """For the `upgrade` command: take no new command, wait (bounded) for those
        running to finish, then `switch(command_id)` and exec the argv it returns.
        Returns only if the wait ran out (the upgrade fails, nothing changed)."""
        import os
        import sys

        mine = threading.current_thread().command_id
        with self._starting:
            self.restarting = True
        deadline = time.monotonic() + upgrade_guard.DRAIN_SECONDS
        while any(k != mine and v.get("state") == "started"
                  for k, v in list(self.journal.entries.items())):
            if time.monotonic() > deadline or self.stop.wait(1):
                with self._starting:
                    self.restarting = False
                return
        argv = switch(mine)
        flushed = time.monotonic() + 2  # the task log's last lines on their way
        while self._outbox.qsize() > 1 and time.monotonic() < flushed:
            time.sleep(0.05)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)

    def shutdown(self):
        self.stop.set()
        self._measure_disk.set()
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.cancel()

    def _start_heartbeats(self, outbox, every):
        sample_every = sample_seconds()

        def beat():
            sampled = -sample_every  # the environments' figures: once a sample interval
            while not self.stop.is_set():
                try:
                    metrics = pb.HostMetrics(**self.host_sampler().sample())
                except Exception as exc:  # a failed sample must not stop heartbeats
                    log.warning("host metrics failed: %s", exc)
                    metrics = None
                sampler = None
                if time.monotonic() - sampled >= sample_every - SAMPLE_SLACK_S:
                    sampler, sampled = self.beat_sampler, time.monotonic()
                outbox.put(pb.AgentMessage(heartbeat=heartbeat(metrics, sampler)))
                self.status.update(last_heartbeat=now_iso())
                if _closed(outbox) or self.stop.wait(every or 15):
                    return
        threading.Thread(target=beat, name="berth-heartbeat", daemon=True).start()

    def mail_catcher(self):
        """Where non-production ERPs' mail goes (agent/mail/), started when first
        needed (a server with none of them holds no SMTP server nor its imports);
        None when the engine's bridge is not found: those ERPs' mail then fails to
        send, and never leaves."""
        with self._catcher_lock:
            if self._catcher is None:
                try:
                    from agent.mail.catcher import Catcher, bridge_gateway

                    self._catcher = Catcher(self.data_dir, bridge_gateway()).start()
                except Exception as exc:
                    log.warning("no mail catcher: %s", exc)
            return self._catcher

    def _start_disk_meter(self):
        """A pass at start, then every interval; each report goes on the current
        stream (without one, it waits for the next stream's welcome)."""
        # Imported here, not in the thread: what compiling it allocates would stay
        # in the thread's own malloc arena (~0.4 MB of resident memory).
        from agent.metrics.disk import DiskMeter, interval_seconds, lower_priority

        def measure():
            lower_priority()
            meter, every = DiskMeter(stop=self.stop), interval_seconds()
            while not self.stop.is_set():
                try:
                    figures = meter.measure()
                except Exception:  # the next pass may do better; the daemon goes on
                    log.exception("disk measurement failed")
                else:
                    self._disk = pb.DiskReport(environments=[pb.EnvironmentDisk(
                        **{k: v for k, v in f.items() if v is not None}) for f in figures])
                    outbox = self._outbox
                    if not _closed(outbox):
                        outbox.put(pb.AgentMessage(disk=self._disk))
                    self.status.update(disk_measured_at=now_iso(), disk={
                        f["environment_id"]: {k: f[k] for k in FIGURES} for f in figures})
                self._measure_disk.wait(every)
                self._measure_disk.clear()
        threading.Thread(target=measure, name="berth-disk", daemon=True).start()

    def _start_proxy_watch(self):
        """Once this server runs a proxy (a deploy configured it): at start and then
        every BERTH_AGENT_PROXY_WATCH_SECONDS, bring it back if it is gone, reload
        it if its routes changed, ask for missing certificates, and show its
        state in the status file."""
        import os

        settings = self.data_dir / "proxy" / "settings.json"
        every = float(os.environ.get("BERTH_AGENT_PROXY_WATCH_SECONDS") or PROXY_WATCH_SECONDS)

        def watch():
            while True:
                if settings.exists():
                    try:
                        done = self.proxy().watch()
                        if done:
                            log.warning("the proxy was %s with its routes", done)
                        report = self.proxy().report()
                    except Exception as exc:  # the next pass may do better
                        log.warning("the proxy check failed: %s", exc)
                        report = {"running": False, "reason": str(exc), "certificates": {}}
                    self.status.update(proxy=report)
                    self._report_proxy(report)
                if self.stop.wait(every):
                    return
        threading.Thread(target=watch, name="berth-proxy-watch", daemon=True).start()

    def _report_proxy(self, report):
        """To the control plane when it changed (not for a new check time alone)."""
        message = wire.proxy_report(report)
        if message == self._proxy_report:
            return
        self._proxy_report = message
        outbox = self._outbox
        if not _closed(outbox):
            outbox.put(pb.AgentMessage(proxy=self._proxy_report))

    def _resume_restores(self):
        """Restores the last stop cut short (their commands were reported failed)
        are rolled back to their safety backups, on a thread of their own."""
        from agent.config import RESTORE_JOURNAL
        from agent.metrics.disk import env_root

        if not any(Path(env_root()).glob(f"*/{RESTORE_JOURNAL}")):
            return

        def resume():
            from agent.backups.backups import Backups
            from agent.deploy.environments import Environments

            def task_log(level, message):
                log.log(logging.ERROR if level == "error" else logging.INFO, "%s", message)
            try:
                Backups(Environments(self.docker()), self.config.credential).resume_interrupted(
                    task_log)
            except Exception:
                log.exception("rolling back interrupted restores failed")
        threading.Thread(target=resume, name="berth-resume-restores", daemon=True).start()

    def _start_wal_shipper(self):
        """Each environment's archived WAL to backup storage (agent/backups/wal.py),
        a pass every WAL_PASS_SECONDS on a thread of its own. The shipper (and the
        engine's client it loads) only once an environment archives."""
        from agent.config import WAL_ARCHIVING
        from agent.metrics.disk import env_root

        def ship():
            root, shipper = Path(env_root()), None
            while not self.stop.wait(WAL_PASS_SECONDS):
                if not any(root.glob(f"*/{WAL_ARCHIVING}")):
                    continue
                try:
                    if shipper is None:
                        from agent.backups.wal import Shipper
                        from agent.deploy.environments import Environments
                        shipper = Shipper(Environments(None, root=root),
                                          self.config.credential, self.docker)
                    shipper.run_once()
                except Exception:  # the next pass tries again; the report says why
                    log.exception("a WAL shipping pass failed")
        threading.Thread(target=ship, name="berth-wal", daemon=True).start()

    # --- durable commands --------------------------------------------------

    def _send(self, outbox, message):
        """On the stream the command came by or, once that one has ended, on the
        current one: a result must not die with the stream it was started on. (One
        lost between two streams is asked for again by the next stream.)"""
        (self._outbox if _closed(outbox) else outbox).put(message)

    def _execute(self, outbox, command):
        with self._starting:
            if self.restarting:  # not acknowledged: the new version gets it again
                return
            started = self.journal.start(command.id)
        if not started:  # redelivered: acknowledge, never run twice
            done = self.journal.get(command.id)
            outbox.put(_ack(command.id, duplicate=True))
            if done["state"] == "done":
                outbox.put(result_message(command.id, done["ok"], done["result"], done["error"]))
            return
        outbox.put(_ack(command.id))
        threading.current_thread().command_id = command.id  # for restart_into
        log = _TaskLog(lambda message: self._send(outbox, message), command.id)
        try:
            payload = wire.payload(command)
            result, ok, error = self.handle_command(command.kind, payload, log), True, None
        except Exception as exc:
            log("error", str(exc))
            # A failed command may still report what it did (a restore's safety
            # backup, a deploy's pre-deploy backup).
            result = getattr(exc, "partial_result", None)
            result, ok, error = result if isinstance(result, dict) else None, False, str(exc)
        self.journal.finish(command.id, ok, result, error)
        self._send(outbox, result_message(command.id, ok, result, error))
        if ok and command.kind in DISK_CHANGING:
            self._measure_disk.set()

    def handle_command(self, kind, payload, log):
        return commands.run(self, kind, payload, log)

    # --- live requests -------------------------------------------------------

    def _answer(self, outbox, request):
        outbox.put(pb.AgentMessage(reply=live.reply_to(self, request)))


def heartbeat(metrics, containers=None):
    """A Heartbeat: the host's metrics (None when they could not be taken), the
    containers restarting in a loop and, with `containers` (a function giving the
    sampler, imported only once the server has an environment's containers), each
    environment's running containers' figures (the metric history's samples)."""
    from agent.metrics import engine
    from agent.metrics.crash_loops import ENV_LABEL, crash_loops

    loops, environments = [], []
    try:
        rows = engine.labeled_containers(ENV_LABEL, timeout=5)
        loops = [pb.CrashLoop(**loop) for loop in crash_loops(rows=rows)]
        if containers is not None and rows:
            environments = [pb.EnvironmentStats(environment_id=env, **{
                f"{role}_{name}": _taken(roles.get(role), name)
                for role in ("erp", "postgres") for name in ("cpu_percent", "memory_used_bytes")})
                for env, roles in containers().heartbeat(rows).items()]
    except Exception as exc:  # no engine, say: the heartbeat goes without
        log.debug("containers not looked at: %s", exc)
    return pb.Heartbeat(sent_at_unix_ms=int(time.time() * 1000), metrics=metrics,
                        crash_loops=loops, environments=environments)


def sample_seconds():
    """How often heartbeats carry the environments' figures (the metric history's
    minute; CPU is measured over it). BERTH_AGENT_SAMPLE_SECONDS for tests."""
    try:
        return max(1.0, float(os.environ.get("BERTH_AGENT_SAMPLE_SECONDS") or SAMPLE_S))
    except ValueError:
        return SAMPLE_S


def _taken(figures, name):
    """A container's figure for a heartbeat: -1 when not taken (the protocol's word)."""
    value = figures.get(name) if figures else None
    return -1 if value is None else value


def channel_with_options(address, tls):
    if tls:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(),
                                   options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def _drain(outbox):
    """The request stream: whatever the agent queues, until the session ends."""
    while True:
        item = outbox.get()
        if item is _END:
            outbox.put(_END)  # others may look for it too
            return
        yield item


def _closed(outbox):
    with outbox.mutex:
        return _END in outbox.queue


def _closed_queue():
    q = queue.Queue()
    q.put(_END)
    return q


class _TaskLog:
    """`log(level, message)` for one command: numbered progress lines."""

    def __init__(self, send, command_id):
        self.send, self.command_id, self.seq = send, command_id, 0

    def __call__(self, level, message):
        self.seq += 1
        self.send(pb.AgentMessage(log=pb.TaskLog(
            command_id=self.command_id, seq=self.seq, level=level, message=message)))

    def phase(self, name):
        self.send(pb.AgentMessage(phase=pb.TaskPhase(command_id=self.command_id, phase=name)))


def _ack(command_id, duplicate=False):
    return pb.AgentMessage(ack=pb.CommandAck(command_id=command_id, duplicate=duplicate))


def result_message(command_id, ok, result, error):
    return pb.AgentMessage(result=pb.CommandResult(
        command_id=command_id, ok=ok, error=error or "",
        result_json=json.dumps(result) if result is not None else ""))
