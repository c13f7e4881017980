"""A client made with the Python SDK 1.x (`mcp` 1.30, legacy era only).

Its stdio_client spawns the bridge as an MCP CLI would, and a ClientSession
speaks the legacy handshake over it. Driven by driver.mjs through
control.py.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from control import REQUEST_TIMEOUT, bridge_errlog, run_client, tag_of, text_of


class Session:
    era = "legacy"

    def __init__(self, session: ClientSession, initialized: types.InitializeResult):
        self._session = session
        self.version = initialized.protocolVersion
        tools = initialized.capabilities.tools
        self.tools_list_changed = bool(tools and tools.listChanged)

    async def list_tools(self) -> list[str]:
        return [tool.name for tool in (await self._session.list_tools()).tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return text_of(await self._session.call_tool(name, arguments))

    async def listen(self) -> str:
        raise RuntimeError("subscriptions/listen is not in the 1.x SDK")


@asynccontextmanager
async def open_session(command: dict[str, Any], emit):
    params = StdioServerParameters(
        command=command["command"], args=command["args"], env={**os.environ, **command.get("env", {})}
    )

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(message, types.ServerNotification) and isinstance(root, types.ToolListChangedNotification):
            emit({"event": "list_changed", "list": "tools", "tag": tag_of(root)})

    with bridge_errlog(command) as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(
                read, write, read_timeout_seconds=timedelta(seconds=REQUEST_TIMEOUT), message_handler=on_message
            ) as session:
                yield Session(session, await session.initialize())


if __name__ == "__main__":
    run_client(open_session)
