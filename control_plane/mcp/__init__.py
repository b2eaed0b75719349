"""The MCP server for AI agents: tools over the same services as the APIs
(tools.py), served at `/mcp` over streamable HTTP (server.py)."""
