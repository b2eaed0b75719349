"""`berthctl mcp`, the real console script as an AI client starts it (the SDK's stdio
client), against the real `berth serve`: the control plane's tools for the key it
was given in its environment, never on its command line."""

import json

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.berthctl.conftest import BERTHCTL, berthctl, clean_env, no_traceback, served  # noqa: F401


def _use(served, tmp_path, key):  # noqa: F811
    async def run():
        params = StdioServerParameters(command=BERTHCTL, args=["mcp"], env=clean_env(
            tmp_path, BERTH_URL=served.url, BERTH_API_KEY=key))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            return await mcp.list_tools(), await mcp.call_tool("list_servers", {})
    return anyio.run(run)


def test_the_tools_are_the_keys_over_stdio(served, tmp_path):  # noqa: F811
    tools, servers = _use(served, tmp_path, served.keys["read_only"])
    names = {t.name for t in tools.tools}
    assert "list_projects" in names and "stop_environment" not in names
    assert all(t.annotations.read_only_hint for t in tools.tools)
    assert not servers.is_error and "pagination" in json.loads(servers.content[0].text)
    tools, _ = _use(served, tmp_path, served.keys["full_access"])
    assert {"stop_environment", "deploy_environment"} <= {t.name for t in tools.tools}


def test_without_a_key_it_says_so_and_exits(tmp_path, served):  # noqa: F811
    result = berthctl("mcp", env=clean_env(tmp_path, BERTH_URL=served.url), input="")
    no_traceback(result)
    assert result.returncode == 3 and "Not logged in" in result.stderr
