"""py-sdk-echo: the `echo_echo` tool of moat's `echo` plugin on the official Python SDK (`mcp`),
served over stdio, or with `--http HOST:PORT` over Streamable HTTP (sessions, JSON answers, the
SDK's own app on uvicorn): the same name, input schema and result as `native-echo`, no output
schema.

Run with the virtualenv `./dev` prepares: `.venv/bin/python tests/perf/baselines/py_echo.py`.
"""

import sys

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

ECHO = types.Tool(
    name="echo_echo",
    description="Returns `message` exactly as it was given.",
    input_schema={
        "type": "object",
        "properties": {"message": {"type": "string", "description": "the text to send back."}},
        "required": ["message"],
        "additionalProperties": False,
    },
)


async def list_tools(
    ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO])


async def call_tool(
    ctx: ServerRequestContext, params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name != ECHO.name:
        raise MCPError(code=types.INVALID_PARAMS, message=f'unknown tool "{params.name}"')
    message = (params.arguments or {}).get("message")
    if not isinstance(message, str):
        raise MCPError(code=types.INVALID_PARAMS, message="`message` must be a string")
    # As moat renders a string result: text alone.
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)])


server = Server("py-sdk-echo", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(address: str) -> None:
    import uvicorn

    host, port = address.rsplit(":", 1)
    app = server.streamable_http_app(json_response=True, host=host)
    uvicorn.run(app, host=host, port=int(port), log_level="error", access_log=False)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        serve_http(sys.argv[2])
    else:
        anyio.run(main)
