"""`berth-agent`: register, run, status. (argparse, not click: the agent runs
for months on customer servers, and every megabyte of its memory counts.)"""

import argparse
import json
import logging
import signal
import sys

from agent import __version__
from agent import config as cfg
from agent import status as status_mod
from protocol.states import CertificateState


def register(args):
    """Trade a registration token for this agent's own credential."""
    from agent.register import RegistrationError
    from agent.register import register as do_register

    if args.token_file == "-":
        token = sys.stdin.read()
    else:
        with open(args.token_file) as fh:
            token = fh.read()
    try:
        conf = do_register(args.control_plane, token)
    except RegistrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"registered as server {conf.server_id}; configuration in {cfg.config_path()}")
    return 0


def run(args):
    """Connect to the control plane and serve it (reconnects by itself)."""
    from agent.daemon import Agent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        conf = cfg.AgentConfig.load()
    except FileNotFoundError:
        print(f"error: not registered ({cfg.config_path()} missing); run "
              "`berth-agent register` first", file=sys.stderr)
        return 1
    agent = Agent(conf, cfg.data_dir())
    signal.signal(signal.SIGTERM, lambda *_: agent.shutdown())
    signal.signal(signal.SIGINT, lambda *_: agent.shutdown())
    agent.run_forever()
    return 0


def status(args):
    """What the agent is doing; exit code 1 when it is not connected."""
    state = status_mod.read(cfg.data_dir() / "status.json") or {
        "running": False, "connected": False}
    try:
        state.setdefault("server_id", cfg.AgentConfig.load().server_id)
    except (FileNotFoundError, ValueError, TypeError):
        pass
    state["environments"] = _environments()
    print(json.dumps(state, indent=2) if args.json else _render(state))
    return 0 if state.get("connected") else 1


def _environments():
    """Berth's containers on this host, by environment (empty if no engine)."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        containers = client.containers.list(all=True, filters={"label": "berth.environment_id"},
                                           ignore_removed=True)
    except Exception:
        return None
    envs = {}
    for c in containers:
        env = envs.setdefault(c.labels["berth.environment_id"], [])
        env.append({"name": c.name, "role": c.labels.get("berth.role"), "state": c.status})
    return envs


def _render(s):
    lines = [
        f"agent:          {'running' if s.get('running') else 'not running'} "
        f"(berth-agent {s.get('version', __version__)})",
        f"connection:     {'connected' if s.get('connected') else 'disconnected'}"
        + (f" since {s['since']}" if s.get("since") else ""),
        f"control plane:  {s.get('control_plane', '-')} (gRPC {s.get('grpc_address', '-')})",
        f"server id:      {s.get('server_id', '-')}",
        f"last heartbeat: {s.get('last_heartbeat') or '-'}",
    ]
    if s.get("last_error"):
        lines.append(f"last error:     {s['last_error']} ({s.get('last_error_at')})")
    for key, op in sorted((s.get("operations") or {}).items()) if s.get("running") else ():
        lines.append(f"{op.get('kind', 'work') + ':':15} {key}: {op.get('phase', '-')}, "
                     f"{_size(op.get('bytes_done'))} (since {op.get('started_at', '-')})")
    proxy = s.get("proxy")
    if proxy and s.get("running"):
        lines.append(f"proxy:          {'running' if proxy.get('running') else 'down'}"
                     + (f" ({proxy['reason']})" if proxy.get("reason") else "")
                     + (f", checked {proxy['checked_at']}" if proxy.get("checked_at") else ""))
        for name, cert in sorted((proxy.get("certificates") or {}).items()):
            state = cert.get("state", "?")
            if state == CertificateState.VALID:
                state += f" until {cert.get('valid_until')}"
            elif cert.get("reason"):
                state += f": {cert['reason']}"
            lines.append(f"  {name}: certificate {state}")
    envs = s.get("environments")
    if envs is None:
        lines.append("environments:   container engine not reachable")
    elif not envs:
        lines.append("environments:   none")
    else:
        lines.append("environments:")
        for env_id, containers in sorted(envs.items()):
            lines.append(f"  {env_id}")
            for c in containers:
                lines.append(f"    {c['role'] or '?':9} {c['name']:40} {c['state']}")
            disk = (s.get("disk") or {}).get(env_id)
            if disk:
                lines.append(f"    {'disk':9} " + ", ".join(
                    f"{label} {_size(disk.get(key))}" for label, key in (
                        ("database", "database_bytes"), ("filestore", "filestore_bytes"),
                        ("add-ons", "addons_bytes"))) + f" (measured {s.get('disk_measured_at')})")
    return "\n".join(lines)


def _size(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


SSH_COMMANDS = {
    "live": "answer one live request (LiveRequest on stdin, LiveReply on stdout)",
    "exec": "run a durable command once, or attach to it (Command on stdin, frames on stdout)",
    "configure": "write the agent's configuration (JSON on stdin)",
    "check": "facts, metrics, crash loops and the proxy's state, for a check (frames)",
    "disk": "measure the environments' disk use once (DiskReport)",
    "serve": "answer live and check calls while the connection lasts (frames both ways)",
    "shell": "a shell, `odoo shell` or COMMAND in an environment's ERP container, on this "
             "session's terminal",
}


def _shell_arguments(p):
    p.add_argument("environment_id", help="the environment whose ERP container it runs in")
    p.add_argument("--odoo", action="store_true", help="`odoo shell` on its database")
    p.add_argument("--no-tty", action="store_true",
                   help="no terminal: the output and error output apart, stdin's end passed on")
    p.add_argument("command", nargs="*", metavar="-- COMMAND",
                   help="what to run instead of the container's shell")


# The over-SSH commands that take arguments (the others read their message on stdin).
SSH_ARGUMENTS = {"shell": _shell_arguments}


def _over_ssh(name, args):
    from agent import over_ssh

    entry = over_ssh.ENTRY_POINTS[name]
    return entry(args) if name in SSH_ARGUMENTS else entry()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="berth-agent",
                                     description="Berth agent for a customer server.")
    parser.add_argument("--version", action="version", version=f"berth-agent, version {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("register", help=register.__doc__)
    p.add_argument("--control-plane", required=True, help="base URL of the control plane")
    p.add_argument("--token-file", default="-",
                   help="file holding the srt_live_ token ('-', the default: standard input)")
    p.set_defaults(func=register)
    commands.add_parser("run", help=run.__doc__).set_defaults(func=run)
    p = commands.add_parser("status", help=status.__doc__)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=status)
    # Over SSH (agent/over_ssh.py, loaded only then): one call each, the message on stdin.
    for name, about in SSH_COMMANDS.items():
        p = commands.add_parser(name, help=f"(over SSH) {about}")
        SSH_ARGUMENTS.get(name, lambda p: None)(p)
        p.set_defaults(func=lambda args, name=name: _over_ssh(name, args))
    argv = sys.argv[1:] if argv is None else list(argv)
    after = []
    if argv[:1] == ["shell"] and "--" in argv:
        # What follows `--` is the command, whatever it looks like (argparse would
        # refuse it after a subcommand's positional argument).
        at = argv.index("--")
        argv, after = argv[:at], argv[at + 1:]
    args = parser.parse_args(argv)
    if after:
        args.command = [*args.command, *after]
    sys.exit(args.func(args))
