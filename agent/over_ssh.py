"""The agent on a server the control plane reaches over SSH: no resident daemon,
one `berth-agent` invocation per call, with the message on standard input.

- `berth-agent live`: a LiveRequest in, its LiveReply out (the same handlers as
  the daemon's; container metrics are states only, as the spec says over SSH).
- `berth-agent exec`: a Command in; out, as frames (protocol.frames), its
  acknowledgement, task log lines and result. The command runs in a worker
  process of its own session, writing its frames to a file, and `exec` follows
  that file: when the SSH connection drops the command goes on, and the same
  command sent again attaches to it (acknowledged as a duplicate, its log sent
  again from the start, then its result), never running it twice. The command
  id is the key, in the journal the daemon keeps too (under a file lock here:
  several invocations may run at once).
- `berth-agent configure`: the agent's configuration (JSON, with its credential)
  in, written mode 0600: backups authenticate with that credential.
- `berth-agent check`: what a check needs, in one process: the facts, a Heartbeat
  (host metrics, crash loops, as the daemon sends every 15 s) and one pass of the
  daemon's proxy watch (the proxy kept up, its certificates' state), as frames.
- `berth-agent disk`: one pass of the daemon's disk meter, the DiskReport out.
- `berth-agent serve`: `live` and `check` calls, many over one session while
  the control plane holds its connection, so that a call starts no process; it ends
  with the connection. The control plane falls back to one invocation a call when
  it cannot use it (an agent without it, a call while it answers another).
- `berth-agent shell ENVIRONMENT_ID [--odoo] [--no-tty] [-- COMMAND...]`: a shell
  session in the environment's ERP container on the SSH session's own streams
  (agent/shell_terminal.py), with the terminal sshd gives unless `--no-tty`;
  its exit code is the command's."""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time

from agent import commands, live
from agent.config import AgentConfig, config_path, data_dir, write_private
from agent.daemon import Host, result_message
from agent.facts import host_facts
from agent.journal import CommandJournal
from protocol import frames, wire
from protocol.v1 import agent_pb2 as pb

INTERRUPTED = "interrupted: its process ended without a result (the server restarted?); not run again"
KEEP_OUTPUT_SECONDS = 7 * 24 * 3600  # a finished command's frames, for a late re-attach
FOLLOW_POLL_S = 0.1
SERVE_IDLE_SECONDS = 300  # a `serve` with no call for this long ends (so does its session)


class OverSsh(Host):
    over_ssh = True


def _host():
    try:
        config = AgentConfig.load()
    except FileNotFoundError:
        config = None  # live reads need none; a backup says it is not configured
    return OverSsh(config, data_dir())


def _out(data: bytes):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _live(host, data):
    return live.reply_to(host, pb.LiveRequest.FromString(data)).SerializeToString()


def _check(host, data):
    """A check's three answers in one call: the host's facts, a heartbeat (metrics,
    crash loops) and the proxy's report (empty when no proxy runs here), as three
    frames."""
    from agent.daemon import heartbeat

    beat = heartbeat(pb.HostMetrics(**host.host_sampler().sample()))
    parts = [host_facts().SerializeToString(), beat.SerializeToString(), _proxy_report(host)]
    return b"".join(frames.pack(part) for part in parts)


def _proxy_report(host):
    """One pass of the daemon's proxy watch (back if gone, reloaded if its routes
    changed, certificates asked for), its ProxyReport; b"" when no proxy runs here."""
    if not (host.data_dir / "proxy" / "settings.json").exists():
        return b""
    host.proxy().watch()
    return wire.proxy_report(host.proxy().report()).SerializeToString()


def _disk(host, data):
    """One pass of the disk meter (the daemon's runs every 15 minutes): a DiskReport."""
    from agent.metrics.disk import DiskMeter

    return pb.DiskReport(environments=[pb.EnvironmentDisk(
        **{k: v for k, v in f.items() if v is not None}) for f in DiskMeter().measure()]
    ).SerializeToString()


ANSWERS = {"live": _live, "check": _check, "disk": _disk}
# The calls `serve` answers too (the disk's, every 15 minutes and at a lower priority,
# keeps a process of its own).
SERVED = ("live", "check")


def _one_call(name):
    def run():
        if name == "disk":
            from agent.metrics.disk import lower_priority

            lower_priority()
        _out(ANSWERS[name](_host(), sys.stdin.buffer.read()))
        return 0
    return run


def serve():
    """Many calls over one SSH session, one at a time, while the control plane holds
    its connection (no Python started a call): frames in, each NAME, a newline and
    the call's message; frames out, each b"\0" and the answer, or b"\1" and why
    it failed. Ends when standard input does (the connection closed) or after
    SERVE_IDLE_SECONDS without a call."""
    import select

    host, buffer = _host(), b""
    while True:
        whole, buffer = frames.split(buffer)
        for request in whole:
            name, _, data = request.partition(b"\n")
            try:
                if name.decode() not in SERVED:
                    raise ValueError(f"not a call served here: {name[:40]!r}")
                answer = b"\0" + ANSWERS[name.decode()](host, data)
            except Exception as exc:  # this call failed; the next may not
                answer = b"\1" + f"{type(exc).__name__}: {exc}".encode()[:1000]
            _out(frames.pack(answer))
        if not select.select([0], [], [], SERVE_IDLE_SECONDS)[0]:
            return 0
        chunk = os.read(0, 65536)
        if not chunk:
            return 0
        buffer += chunk


def configure():
    conf = AgentConfig(**json.loads(sys.stdin.read()))
    conf.save()
    print(f"configured as server {conf.server_id}; configuration in {config_path()}")
    return 0


# --- durable commands ---------------------------------------------------------------

def _box():
    box = data_dir() / "ssh-commands"
    box.mkdir(parents=True, exist_ok=True, mode=0o700)
    return box


@contextlib.contextmanager
def _journal():
    """The journal, read fresh under an exclusive lock (other invocations, the worker)."""
    path = data_dir() / "commands.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield CommandJournal(path)


def exec_command():
    """Start the command (once), then follow it until its result."""
    command = pb.Command.FromString(sys.stdin.buffer.read())
    box = _box()
    out_path, worker = box / f"{command.id}.out", None
    with _journal() as journal:
        started = journal.start(command.id)
        done = journal.get(command.id)
        if started:
            _prune(box)
            write_private(box / f"{command.id}.cmd", command.SerializeToString().hex())
            with open(out_path, "wb") as out:
                os.chmod(out_path, 0o600)
                # Its own session: the SSH connection's end sends it no hangup.
                worker = subprocess.Popen(
                    [sys.executable, "-m", "agent.over_ssh", "worker", command.id],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL,
                    start_new_session=True)
            write_private(box / f"{command.id}.pid", str(worker.pid))
    _out(frames.frame(pb.AgentMessage(ack=pb.CommandAck(command_id=command.id,
                                                        duplicate=not started))))
    if not started and not out_path.exists():  # pruned, or started by a resident daemon
        if done["state"] == "done":
            _out(frames.frame(result_message(command.id, done["ok"], done["result"],
                                             done["error"])))
            return 0
        out_path.touch(mode=0o600)  # followed: no worker, so answered as interrupted
    _follow(command.id, out_path, worker)
    return 0


def _follow(command_id, out_path, worker):
    """Copy the worker's frames to standard output until its result is among them."""
    buffer, position, last_look = b"", 0, 0.0
    while True:
        with open(out_path, "rb") as fh:
            fh.seek(position)
            chunk = fh.read()
        position += len(chunk)
        if chunk:
            whole, buffer = frames.split(buffer + chunk)
            if whole:
                _out(b"".join(frames.HEADER.pack(len(f)) + f for f in whole))
            if any(pb.AgentMessage.FromString(f).HasField("result") for f in whole):
                return
            continue
        if time.monotonic() - last_look > 1.0:
            last_look = time.monotonic()
            if not _alive(command_id, worker):
                _interrupted(command_id, out_path, position)
                return
        time.sleep(FOLLOW_POLL_S)


def _alive(command_id, worker):
    if worker is not None:
        return worker.poll() is None
    try:
        pid = int((_box() / f"{command_id}.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _interrupted(command_id, out_path, position):
    """The worker is gone: whatever it wrote last, or the journal's answer."""
    with open(out_path, "rb") as fh:
        fh.seek(position)
        rest = fh.read()
    if rest:
        _out(rest)
        whole, _ = frames.split(rest)
        if any(pb.AgentMessage.FromString(f).HasField("result") for f in whole):
            return
    with _journal() as journal:
        entry = journal.get(command_id) or {}
        if entry.get("state") != "done":
            journal.finish(command_id, False, None, INTERRUPTED)
            entry = journal.get(command_id)
    message = result_message(command_id, entry["ok"], entry["result"], entry["error"])
    with open(out_path, "ab") as fh:
        fh.write(frames.frame(message))
    _out(frames.frame(message))


def worker(command_id):
    """The command itself, in its own session: frames to standard output (the file)."""
    command = pb.Command.FromString(bytes.fromhex((_box() / f"{command_id}.cmd").read_text()))
    seq = 0

    def log(level, message):
        nonlocal seq
        seq += 1
        os.write(1, frames.frame(pb.AgentMessage(log=pb.TaskLog(
            command_id=command_id, seq=seq, level=level, message=message))))

    log.phase = lambda name: os.write(1, frames.frame(pb.AgentMessage(
        phase=pb.TaskPhase(command_id=command_id, phase=name))))
    try:
        result = commands.run(_host(), command.kind, wire.payload(command), log)
        ok, error = True, None
    except Exception as exc:
        log("error", str(exc))
        partial = getattr(exc, "partial_result", None)
        result, ok, error = partial if isinstance(partial, dict) else None, False, str(exc)
    with _journal() as journal:
        journal.finish(command_id, ok, result, error)
    os.write(1, frames.frame(result_message(command_id, ok, result, error)))
    (_box() / f"{command_id}.pid").unlink(missing_ok=True)


def shell(args):
    """A shell session on this SSH session's terminal (or standard streams)."""
    from agent.shell import command_for
    from agent.shell_terminal import on_terminal

    return on_terminal(_host().docker(), args.environment_id,
                       command_for(args.odoo, args.command), tty=not args.no_tty)


# The entry points; `shell` takes its parsed arguments (agent/cli.py's SSH_ARGUMENTS).
ENTRY_POINTS = {"exec": exec_command, "shell": shell, "configure": configure, "serve": serve,
                **{name: _one_call(name) for name in ANSWERS}}


def _prune(box):
    cutoff = time.time() - KEEP_OUTPUT_SECONDS
    for path in box.iterdir():
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


if __name__ == "__main__":  # the worker: python -m agent.over_ssh worker ID
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(sys.argv[2])
    else:
        sys.exit("usage: python -m agent.over_ssh worker COMMAND_ID")
