"""`berth-agent`: register, run, status."""

import json
import logging
import signal
import sys

import click

from agent import __version__
from agent import config as cfg
from agent import status as status_mod


@click.group()
@click.version_option(__version__, prog_name="berth-agent")
def cli():
    """Berth agent for a customer server."""


@cli.command()
@click.option("--control-plane", required=True, help="Base URL of the control plane")
@click.option("--token-file", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              show_default=True, help="File holding the srt_live_ token ('-': standard input)")
def register(control_plane, token_file):
    """Trade a registration token for this agent's own credential."""
    from agent.register import RegistrationError
    from agent.register import register as do_register

    with click.open_file(token_file) as fh:
        token = fh.read()
    try:
        conf = do_register(control_plane, token)
    except RegistrationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"registered as server {conf.server_id}; configuration in {cfg.config_path()}")


@cli.command()
def run():
    """Connect to the control plane and serve it (reconnects by itself)."""
    from agent.daemon import Agent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        conf = cfg.AgentConfig.load()
    except FileNotFoundError:
        click.echo(f"error: not registered ({cfg.config_path()} missing); run "
                   "`berth-agent register` first", err=True)
        sys.exit(1)
    agent = Agent(conf, cfg.data_dir())
    signal.signal(signal.SIGTERM, lambda *_: agent.shutdown())
    signal.signal(signal.SIGINT, lambda *_: agent.shutdown())
    agent.run_forever()


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output")
def status(as_json):
    """What the agent is doing; exit code 1 when it is not connected."""
    state = status_mod.read(cfg.data_dir() / "status.json") or {
        "running": False, "connected": False}
    try:
        state.setdefault("server_id", cfg.AgentConfig.load().server_id)
    except (FileNotFoundError, ValueError, TypeError):
        pass
    state["environments"] = _environments()
    if as_json:
        click.echo(json.dumps(state, indent=2))
    else:
        click.echo(_render(state))
    sys.exit(0 if state.get("connected") else 1)


def _environments():
    """Berth's containers on this host, by environment (empty if no engine)."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        containers = client.containers.list(all=True, filters={"label": "berth.environment_id"})
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
    return "\n".join(lines)


def main():
    cli()
