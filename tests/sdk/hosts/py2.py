"""An MCP host built with the Python SDK 2.x (`mcp` 2.3, both eras).

One MCPServer per bridge connection, run over a transport of its own on the
socket stream: newline-delimited JSON-RPC, the stdio framing, built the way
the SDK's stdio_server builds it. The SDK's dual-era loop lets the
connection's first request decide the era, and MCPServer serves
subscriptions/listen on modern connections. Tools: `echo` (its text) and
`whoami` (the identity line's project and requester, and this pid); tools
`listChanged: true`. Usage: see listen.py.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server import MCPServer, NotificationOptions
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from listen import main, whoami


@asynccontextmanager
async def socket_transport(received, stream):
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)

    async def reader() -> None:
        async with read_writer:
            async for line in received:
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # noqa: BLE001 - the SDK's server reports it
                    await read_writer.send(exc)
                    continue
                await read_writer.send(SessionMessage(message))

    async def writer() -> None:
        async with write_reader:
            async for session_message in write_reader:
                text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stream.send(text.encode() + b"\n")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        yield read_stream, write_stream
        tasks.cancel_scope.cancel()


async def serve(received, stream, identity: dict[str, Any]) -> None:
    app = MCPServer("sdk-host-py2")

    @app.tool()
    def echo(text: str) -> str:
        """Returns its text."""
        return text

    @app.tool(name="whoami")
    def who() -> str:
        """Who the bridge said it is."""
        return whoami(identity)

    server = app._lowlevel_server
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with socket_transport(received, stream) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    main(serve)
