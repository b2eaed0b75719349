"""`berth`: the control plane's command line. Its process commands are here (serve,
web, gateway, scheduler, migrate, wheelhouse); `berth admin` is in the admin modules."""

import sys

import click

from control_plane import __version__


@click.group()
@click.version_option(__version__, prog_name="berth")
def cli():
    """Berth control plane."""


def make_app():
    from control_plane.app import create_app

    return create_app()


def _await_schema(app):
    """Scale-out: a web, gateway or scheduler process of a new version takes work only
    once `berth migrate` (run once, by one process) has brought the schema to it; until
    then, or while the database is not up yet, it waits (CP_MIGRATION_WAIT_SECONDS)."""
    import time

    from control_plane.infra import migrate as migrations

    timeout = app.config["MIGRATION_WAIT_SECONDS"]
    deadline, said = time.monotonic() + timeout, False
    while True:
        try:
            left = migrations.pending(app.extensions["berth"].db)
        except Exception as exc:  # not reachable yet: a database starting beside us
            left = [f"the database is not reachable ({type(exc).__name__}: {exc})"]
        if not left:
            return
        if time.monotonic() >= deadline:
            raise click.ClickException(f"the database schema is not current after {timeout} s "
                                       f"(run `berth migrate`): {', '.join(left)}")
        if not said:
            click.echo(f"berth: waiting for `berth migrate` ({', '.join(left)})", err=True)
            said = True
        time.sleep(1)


def _logs(kind):
    from control_plane.infra.observability import configure_logging

    configure_logging(kind)


def _metrics_option(func):
    return click.option("--metrics", "metrics_addr", default=None, metavar="HOST:PORT",
                        help="serve Prometheus /metrics on this address (off by default)")(func)


def _serve_metrics(metrics_addr):
    """The gateway and the scheduler serve no HTTP of their own: /metrics on a port."""
    if metrics_addr:
        from prometheus_client import start_http_server

        host, port = parse_hostport(metrics_addr, 9100)
        server, _ = start_http_server(port, host)
        click.echo(f"berth: metrics on http://{_bracket(host)}:{server.server_port}/metrics",
                   err=True)


def parse_hostport(value, default_port):
    """'127.0.0.1:8000', '[::1]:8000', ':8000' -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, str(default_port)
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{value!r} is not HOST:PORT") from None
    return host, port


@cli.command()
def migrate():
    """Bring the database schema up to date (safe to run twice)."""
    import peewee

    from control_plane.infra import migrate as migrations

    app = make_app()
    try:
        applied = migrations.upgrade(app.extensions["berth"].db)
    except peewee.OperationalError as exc:  # not up yet, or refused: one line, exit 1
        raise click.ClickException(f"cannot reach the database: {str(exc).strip()}") from None
    click.echo(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else ""))


@cli.command()
@click.option("--http", "http_addr", default="127.0.0.1:8000", show_default=True,
              help="HOST:PORT for both REST surfaces and the installer (port 0: any free port)")
@click.option("--grpc", "grpc_addr", default="127.0.0.1:50051", show_default=True,
              help="HOST:PORT of the agent gateway")
def serve(http_addr, grpc_addr):
    """Embedded mode: migrate, then HTTP, the agent gateway and the scheduler in one process."""
    from control_plane.agent_install.wheelhouse import start_building
    from control_plane.http_server import run_http
    from control_plane.infra import migrate as migrations

    _logs("serve")
    app = make_app()
    migrations.upgrade(app.extensions["berth"].db)
    start_building(app)
    start_gateway_thread(app, *parse_hostport(grpc_addr, 50051))
    scheduler = _scheduler(app).start_in_thread()
    try:
        # The gateway's connections share this process's descriptors.
        run_http(app, *parse_hostport(http_addr, 8000), beside=app.config["GRPC_MAX_CONNECTIONS"])
    finally:
        scheduler.stop()


def _scheduler(app):
    from control_plane import scheduler

    berth = app.extensions["berth"]
    jobs = scheduler.jobs(berth)
    click.echo(f"berth: scheduler running ({scheduler.describe(jobs)})", err=True)
    return scheduler.Scheduler(jobs)


@cli.command("scheduler")
@_metrics_option
def scheduler_command(metrics_addr):
    """Scale-out: the periodic jobs in their own process (run `berth migrate` first;
    more than one may run). Stops on SIGTERM or SIGINT."""
    import signal

    stop_on = {signal.SIGTERM, signal.SIGINT}
    # Blocked before any thread starts (the log writer's, the jobs'; each inherits
    # the mask): only this thread takes them, in sigwait, never in the middle of a
    # job. A thread started earlier would take one arriving before sigwait, and die
    # of it (SIGTERM) or raise KeyboardInterrupt here (SIGINT): exit 1, no clean stop.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_on)
    _logs("scheduler")
    app = make_app()
    _await_schema(app)
    scheduler = _scheduler(app)
    _serve_metrics(metrics_addr)
    scheduler.start_in_thread()
    received = signal.sigwait(stop_on)
    click.echo(f"berth: scheduler stopping ({signal.Signals(received).name})", err=True)
    scheduler.stop(timeout=60)


def _gateway(app):
    from pathlib import Path

    from control_plane.gateway.server import Gateway
    from control_plane.infra import config

    cert, key = app.config["GRPC_TLS_CERT"], app.config["GRPC_TLS_KEY"]
    tls = (Path(cert).read_bytes(), Path(key).read_bytes()) if cert and key else None
    return Gateway(tls=tls, redis_url=app.config["REDIS_URL"],
                   images=config.images(app.extensions["berth"].settings),
                   handshake_timeout=app.config["GRPC_HANDSHAKE_TIMEOUT"],
                   max_connections=app.config["GRPC_MAX_CONNECTIONS"],
                   history_every=app.config["METRICS_FLUSH_SECONDS"]
                   if app.config["METRICS_HISTORY"] else 0)


def start_gateway_thread(app, host, port):
    """The gateway on its own event loop inside this process; HTTP threads reach it."""
    from control_plane.app import grpc_public_address

    gateway = _gateway(app)
    bound = gateway.start_in_thread(f"{_bracket(host)}:{port}")
    app.extensions["berth"].gateway = gateway
    if not app.config["GRPC_PUBLIC_ADDRESS"]:
        app.config["GRPC_PUBLIC_ADDRESS"] = grpc_public_address(app, bound)
    click.echo(f"berth: gateway listening on {_bracket(host)}:{bound}", err=True)
    return gateway


def _bracket(host):
    return f"[{host}]" if ":" in host else host


@cli.command()
@click.option("--grpc", "grpc_addr", default="127.0.0.1:50051", show_default=True)
@_metrics_option
def gateway(grpc_addr, metrics_addr):
    """Scale-out: one agent-gateway process (run `berth migrate` first)."""
    import asyncio

    _logs("gateway")
    app = make_app()
    _await_schema(app)
    _serve_metrics(metrics_addr)
    host, port = parse_hostport(grpc_addr, 50051)
    from control_plane.http_server import FD_RESERVE, raise_fd_limit

    raise_fd_limit(app.config["GRPC_MAX_CONNECTIONS"] + FD_RESERVE)
    gw = _gateway(app)

    async def main():
        import signal

        bound = await gw.start(f"{_bracket(host)}:{port}")
        click.echo(f"berth: gateway listening on {_bracket(host)}:{bound}", err=True)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        ended = await gw.drain()
        click.echo(f"berth: gateway stopped ({ended} agent stream(s) handed back)", err=True)

    asyncio.run(main())


@cli.command()
@click.option("--http", "http_addr", default="127.0.0.1:8000", show_default=True)
def web(http_addr):
    """Scale-out: one HTTP process (run `berth migrate` first)."""
    from control_plane.agent_install.wheelhouse import start_building
    from control_plane.http_server import run_http

    _logs("web")
    app = make_app()
    _await_schema(app)
    start_building(app)
    run_http(app, *parse_hostport(http_addr, 8000))


@cli.command()
@click.option("--into", "into", type=click.Path(file_okay=False),
              help="build into this directory without reading any setting (an image build: "
                   "then set CP_WHEELHOUSE_DIR to it)")
def wheelhouse(into):
    """Build the agent packages servers install from (into CP_WHEELHOUSE_DIR, by
    default the data dir)."""
    from control_plane.agent_install import wheelhouse as wh

    if into is None:
        from control_plane.agent_install.wheelhouse import directory as wheelhouse_dir

        into = wheelhouse_dir(make_app().config)
    try:
        path = wh.build_locked(into, force=True)
    except wh.BuildFailed as exc:
        raise click.ClickException(f"cannot build the agent packages: {exc}") from None
    click.echo(f"built {path}")


def main():
    from control_plane.cli import (  # noqa: F401 - registers `berth admin`
        admin,
        admin_backup,
        admin_config,
        admin_domain,
        admin_project,
        admin_rule,
    )
    from control_plane.infra.config import SettingError

    try:
        cli.main(standalone_mode=False)
    except SettingError as exc:  # refused before anything started: one line, no traceback
        click.echo(f"berth: error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
