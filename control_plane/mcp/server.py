"""`/mcp`: the MCP server over streamable HTTP, built with the official SDK, for
AI agents holding an API key (`berthctl mcp` carries it over stdio).

The SDK runs stateless with JSON answers: each POST is one JSON-RPC message
answered whole, so the control plane's WSGI server serves it like any request.
The request's key is authenticated and counted against its rate limit as on the
public API (api/auth.py); it decides the tools offered (tools.py) and is the actor
of every call, which is an audit event (`mcp.call`) besides those of what the call
changes. The handlers run in the request's thread and context (`current_actor()`).
Nothing outlives the request."""

import functools
import json
import re

import anyio
import mcp_types as types
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Blueprint, Response, request
from marshmallow import ValidationError
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from control_plane import __version__
from control_plane.api import auth
from control_plane.api.smorest import invalid_message
from control_plane.infra.db import database
from control_plane.mcp.tools import BY_NAME, TOOLS
from control_plane.services import audit
from control_plane.services.accounts import keys
from control_plane.vocabulary.errors import ApiError, NotFound, Unprocessable

blp = Blueprint("mcp", __name__)
# The tools' input schemas: the API's argument schemas as JSON Schema, inlined.
_converter = MarshmallowPlugin(schema_name_resolver=lambda schema: None)
APISpec("berth", __version__, "3.0.3", plugins=[_converter])
INSTRUCTIONS = ("Berth hosts Odoo ERP environments on servers. Start with list_projects and "
                "list_environments; a change answers with a task whose progress "
                "get_deployment and task_log show. Changes that replace what runs or what is "
                "stored need confirm: true; ask the person first.")


@functools.cache  # the same for every request
def _described(tool):
    return types.Tool(
        name=tool.name, description=tool.description,
        input_schema=_converter.converter.schema2jsonschema(tool.arguments),
        annotations=types.ToolAnnotations(
            read_only_hint=not tool.writes, destructive_hint=tool.destructive,
            idempotent_hint=tool.idempotent, open_world_hint=False))


async def _list_tools(ctx, params):
    actor = auth.current_actor()
    return types.ListToolsResult(tools=[_described(t) for t in TOOLS if t.offered_to(actor)])


async def _call_tool(ctx, params):
    answer, failed = _audited(params.name, dict(params.arguments or {}))
    return types.CallToolResult(content=[types.TextContent(
        type="text", text=json.dumps(answer, default=str))], is_error=failed)


# The logs as resources, each read through its tool:
# (name, URI template, its pattern, the tool, description).
UUID = "[0-9a-fA-F-]{36}"
RESOURCES = [
    ("task-log", "berth://environments/{environment_id}/task-log",
     re.compile(rf"berth://environments/(?P<environment_id>{UUID})/task-log"), "task_log",
     "The newest task's log of an environment (a deploy's, a backup's...)."),
    ("one-task-log", "berth://environments/{environment_id}/tasks/{task_id}/log",
     re.compile(rf"berth://environments/(?P<environment_id>{UUID})/tasks/(?P<task_id>{UUID})/log"),
     "task_log", "One task's log."),
    ("runtime-logs", "berth://environments/{environment_id}/runtime-logs/{source}",
     re.compile(rf"berth://environments/(?P<environment_id>{UUID})/runtime-logs/"
                r"(?P<source>erp|postgres|container)"), "runtime_logs",
     "The ERP's (erp), PostgreSQL's (postgres) or both containers' (container) own log now."),
]


async def _list_resource_templates(ctx, params):
    return types.ListResourceTemplatesResult(resource_templates=[
        types.ResourceTemplate(name=name, uri_template=template, description=description,
                               mime_type="text/plain")
        for name, template, _, _, description in RESOURCES])


async def _read_resource(ctx, params):
    uri = str(params.uri)
    found = next(((tool, match.groupdict()) for _, _, pattern, tool, _ in RESOURCES
                  if (match := pattern.fullmatch(uri))), None)
    if found is None:
        raise MCPError(types.INVALID_PARAMS, f"No resource is named {uri!r}.")
    answer, failed = _audited(found[0], {**found[1], "lines": 1000})
    if failed:
        raise MCPError(types.INVALID_PARAMS, answer["message"], data=answer)
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=uri, mime_type="text/plain", text=answer["log"])])


def _audited(name, given):
    """A tool's answer (or its error's body) and whether it failed: an audit event
    of the key either way."""
    actor, tool = auth.current_actor(), BY_NAME.get(name)
    try:
        answer, failed = _run(actor, tool, name, given), False
    except ApiError as err:
        answer, failed = err.body(), True
    with database.atomic():
        audit.record(actor.organization_id, "mcp.call", "mcp_tool", name,
                     {"ok": not failed, **({"error": answer["error"]} if failed else {})})
    return answer, failed


def _run(actor, tool, name, given):
    if tool is None or (tool.writes and actor.read_only):
        if tool is not None:  # said as the API says it to a read-only key
            keys.authorize_method(actor.key, "POST")
        raise NotFound(f"No tool is named {name!r} for this key.")
    if tool.writes:
        keys.authorize_method(actor.key, "POST")  # a key whose creator was deleted
    try:
        loaded = tool.arguments.load(given)
    except ValidationError as err:
        raise Unprocessable(invalid_message(err.messages), details=err.messages) from None
    if tool.destructive and loaded.pop("confirm") is not True:
        raise Unprocessable(f"{name} changes what runs or what is stored: call it with "
                            "confirm: true once the person asking has agreed.")
    loaded.pop("confirm", None)
    return tool.call(actor, loaded)


SERVER = Server("berth", version=__version__, instructions=INSTRUCTIONS,
                on_list_tools=_list_tools, on_call_tool=_call_tool,
                on_list_resource_templates=_list_resource_templates,
                on_read_resource=_read_resource)


@blp.post("/mcp")  # stateless: no stream to GET, no session to DELETE (405 both)
def endpoint():
    auth.authenticate_acting_key()  # the tools read it as current_actor()
    status, headers, body = _answer(request.method, request.headers,
                                    request.get_data(cache=False))
    return Response(body, status=status, headers=headers)


def _answer(method, headers, body):
    """One HTTP request through the SDK's transport (ASGI, in this thread's own event
    loop): (status, headers, body)."""
    answer = {"status": 500, "headers": [], "body": b""}

    async def receive():
        nonlocal body
        if body is None:
            await anyio.sleep_forever()  # the client is still there until the answer
        message, body = {"type": "http.request", "body": body, "more_body": False}, None
        return message

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = int(message["status"])
            answer["headers"] = [(k.decode(), v.decode()) for k, v in message["headers"]]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": "/mcp", "raw_path": b"/mcp",
             "query_string": b"", "root_path": "", "server": ("localhost", 80),
             "client": (request.remote_addr or "", 0),
             "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                         for k, v in headers.items()]}

    async def serve():
        manager = StreamableHTTPSessionManager(app=SERVER, json_response=True, stateless=True)
        async with manager.run():
            await manager.handle_request(scope, receive, send)

    anyio.run(serve)
    return answer["status"], answer["headers"], answer["body"]
