"""The `berthctl` command: global options, login, completion, and the one place
where errors become a message on stderr and an exit code (docs/berthctl.md)."""

import os
import sys

import click

from berthctl import __version__, config
from berthctl.client import OPS, Client
from berthctl.commands import read_secret
from berthctl.errors import INTERRUPTED, USAGE, CliError
from berthctl.output import echo


class State:
    """What every command reads: the output format and a lazily made client."""

    def __init__(self):
        self.output, self.url_option, self._client = "table", None, None

    @property
    def client(self):
        if self._client is None:
            self._client = Client(*config.resolve(self.url_option))
        return self._client


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", metavar="URL", help="The control plane (default: BERTH_URL, then the "
                                           "stored login).")
@click.version_option(__version__, "--version", prog_name="berthctl")
@click.pass_context
def cli(ctx, url):
    """Berth from the command line: environments, deployments, logs, caught mails,
    metrics, backups, automation rules, notification channels and the audit log."""
    ctx.ensure_object(State).url_option = url


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@click.option("--url", "login_url", metavar="URL", help="The control plane's URL (asked "
                                                        "when not given).")
@click.option("--user-token", is_flag=True, help="Also store a user token (`usr_live_…`) "
              "for the deployment-operations API: read after the key, on the next line.")
@click.pass_context
def login(ctx, login_url, user_token):
    """Store the URL and an API key (read from stdin, never from the command line).

    With a terminal the key is asked without echo; otherwise the first line of
    stdin is the key (and the second the user token with --user-token)."""
    if ctx.args:  # a key there would sit in shell history and `ps`; it is not echoed back
        raise click.UsageError("login takes no arguments: the API key is read from stdin, "
                               "never from the command line.")
    state = ctx.obj
    url = login_url or state.url_option or os.environ.get("BERTH_URL")
    if not url:
        url = click.prompt("Control plane URL", default=config.DEFAULT_URL, err=True)
    url = config.normalize_url(url)
    api_key = read_secret("API key")
    token = read_secret("User token") if user_token else None
    client = Client(url, api_key, token)
    client.get("/projects", limit=1)  # 401/403 here: nothing is stored
    if token:
        client.request("GET", "/deployments", params={"limit": 1}, api=OPS)
    path = config.save({"url": url, "api_key": api_key, **({"user_token": token} if token
                                                            else {})})
    click.echo(f"Logged in to {url}; stored in {path}", err=True)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the shell completion script, e.g. `eval "$(berthctl completion bash)"`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "berthctl", "_BERTHCTL_COMPLETE").source())


def _set_output(ctx, _param, value):
    if value is not None:  # not given here: what an outer level set stays
        ctx.ensure_object(State).output = value


def _add_output_option(command):
    """`--output/-o table|json` on this command and every one below it, so that it
    is taken before or after the command and subcommand, as kubectl's and gh's users
    type it. A command's own `-o` (`backups download -o PATH`) keeps it."""
    taken = {name for param in command.params for name in param.opts}
    names = [name for name in ("-o", "--output") if name not in taken]
    command.params.append(click.Option(
        names, type=click.Choice(["table", "json"]), expose_value=False,
        callback=_set_output, help="table (the default), or json: the API's JSON as "
        "it came. Taken before or after any command; the last one given wins."))
    for sub in getattr(command, "commands", {}).values():
        _add_output_option(sub)


def _register():
    from berthctl.commands import (
        audit,
        backups,
        builds,
        channels,
        envs,
        logs,
        mails,
        mcp,
        metrics,
        projects,
        rules,
        servers,
        shell,
        sizes,
    )

    for module in (projects, servers, rules, audit, envs, logs, mails, shell, metrics, sizes,
                   backups, builds, channels, mcp):
        for command in module.COMMANDS:
            cli.add_command(command)
    _add_output_option(cli)


_register()


def main(argv=None):
    """Run the command; every failure ends here as a message and an exit code."""
    try:
        code = cli.main(args=argv, prog_name="berthctl", standalone_mode=False)
    except CliError as err:
        echo(f"berthctl: error: {err}", err=True)  # the API's message, made printable
        code = err.exit_code
    except click.exceptions.Abort:  # Ctrl-C or EOF at a prompt
        click.echo("berthctl: interrupted", err=True)
        code = INTERRUPTED
    except KeyboardInterrupt:
        click.echo("\nberthctl: interrupted", err=True)
        code = INTERRUPTED
    except click.ClickException as err:
        err.show()
        code = err.exit_code if err.exit_code is not None else USAGE
    except BrokenPipeError:  # `berthctl … | head`: the reader left
        _quiet_stdout()
        code = 0
    except Exception as err:  # noqa: BLE001 a bug shows as one line, not a traceback
        if os.environ.get("BERTHCTL_DEBUG"):
            raise
        echo(f"berthctl: unexpected error: {type(err).__name__}: {err} "
             "(BERTHCTL_DEBUG=1 shows the traceback)", err=True)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


def _quiet_stdout():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
