"""An MCP host built with the Python SDK 2.x (`mcp` 2.3, both eras).

One MCPServer per bridge connection, run over the socket stream
(newline-delimited JSON-RPC, the stdio framing: listen.line_transport) with
the SDK's 2.x message types and context streams, as its stdio_server does.
The SDK's dual-era loop lets the connection's first request decide the era,
and MCPServer serves subscriptions/listen on modern connections. Tools `echo`
and `whoami` (listen.add_tools), tools `listChanged: true`. Usage: see
listen.py.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import MCPServer, NotificationOptions
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from listen import add_tools, line_transport, main


def streams():
    return create_context_streams[SessionMessage | Exception](0), create_context_streams[SessionMessage](0)


async def serve(received, stream, identity: dict[str, Any]) -> None:
    app = MCPServer("sdk-host-py2")
    add_tools(app, identity)
    server = app._lowlevel_server
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with line_transport(
        received,
        stream,
        parse=lambda line: SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False)),
        dump=lambda message: message.message.model_dump_json(by_alias=True, exclude_unset=True),
        streams=streams,
    ) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    main(serve)
