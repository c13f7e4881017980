"""An MCP host built with the Python SDK 1.x (`mcp` 1.30, legacy era only).

One FastMCP server per bridge connection, run over the socket stream
(newline-delimited JSON-RPC, the stdio framing: listen.line_transport) with
the SDK's 1.x message types. Tools `echo` and `whoami` (listen.add_tools),
tools `listChanged: true`. Usage: see listen.py.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
from mcp.server.fastmcp import FastMCP
from mcp.server.lowlevel import NotificationOptions
from mcp.shared.message import SessionMessage

from listen import add_tools, line_transport, main


def streams():
    return anyio.create_memory_object_stream(0), anyio.create_memory_object_stream(0)


async def serve(received, stream, identity: dict[str, Any]) -> None:
    app = FastMCP("sdk-host-py1", log_level="WARNING")
    add_tools(app, identity)
    server = app._mcp_server
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with line_transport(
        received,
        stream,
        parse=lambda line: SessionMessage(types.JSONRPCMessage.model_validate_json(line)),
        dump=lambda message: message.message.model_dump_json(by_alias=True, exclude_none=True),
        streams=streams,
    ) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    main(serve)
