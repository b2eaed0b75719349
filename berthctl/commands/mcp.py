"""`berthctl mcp`: an MCP server on stdio for AI agents (Claude Desktop, editors),
carrying each message to the control plane's `/mcp` with this login's API key, so
the agent's powers are exactly the key's. The tools live on the control plane;
this is the stdio end of the same server, built with the official MCP SDK."""

import click

from berthctl import config
from berthctl.client import USER_AGENT
from berthctl.errors import AUTH, USAGE, CliError

TIMEOUT = 60  # seconds for one message; a tool answers at once (a change is a task)


@click.command()
@click.pass_obj
def mcp(state):
    """An MCP server on stdio, its tools those of the control plane's /mcp for this
    login's API key (a read-only key: read-only tools). Configure an AI client to
    run `berthctl mcp` with BERTH_URL and BERTH_API_KEY, or after `berthctl login`."""
    url, api_key, _ = config.resolve(state.url_option)
    if not api_key:
        raise CliError("Not logged in: run `berthctl login` or set BERTH_URL and "
                       "BERTH_API_KEY.", AUTH)
    try:  # not a dependency of berthctl alone: `berth[mcp]`
        import anyio
        import httpx2  # noqa: F401 - the SDK's HTTP client
        from mcp.client.streamable_http import streamable_http_client  # noqa: F401
    except ImportError:
        raise CliError("berthctl mcp needs the MCP SDK: pip install 'berth[mcp]'.",
                       USAGE) from None
    anyio.run(_bridge, f"{url}/mcp", api_key)


async def _bridge(endpoint, api_key):
    """Messages from stdin to the endpoint and its answers to stdout, until stdin
    ends (the AI client has gone)."""
    import anyio
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server

    headers = {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}
    async with httpx2.AsyncClient(headers=headers, timeout=TIMEOUT) as http, \
            streamable_http_client(endpoint, http_client=http) as (remote_in, remote_out), \
            stdio_server() as (local_in, local_out), anyio.create_task_group() as tasks:

        async def to_control_plane():
            async for message in local_in:
                if not isinstance(message, Exception):  # a line that is not JSON-RPC
                    await remote_out.send(message)
            tasks.cancel_scope.cancel()

        async def to_agent():
            async for message in remote_in:
                if isinstance(message, Exception):
                    click.echo(f"berthctl mcp: {message}", err=True)
                else:
                    await local_out.send(message)

        tasks.start_soon(to_control_plane)
        tasks.start_soon(to_agent)


COMMANDS = [mcp]
