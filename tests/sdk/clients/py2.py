"""A client made with the Python SDK 2.x (`mcp` 2.3, both eras).

`Client` in its default mode='auto': it probes with server/discover on the
bridge it spawned (the same process the session then uses) and speaks
modern to a modern server, legacy after any other answer. Its stdio_client
spawns the bridge as an MCP CLI would; the SDK's response cache is off
(cache=None) so that every request goes through the bridge. Driven by
driver.mjs through control.py.

Change notifications: in a legacy session the untagged ones reach the
message handler; in a modern session a tagged one counts only when the SDK
routed it to the open Subscription (it drops those that come before the
listen's acknowledgement), so that is where it is reported.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from control import REQUEST_TIMEOUT, bridge_errlog, error_of, run_client, tag_of, text_of


class Session:
    def __init__(self, client: Client, tasks: anyio.abc.TaskGroup, emit):
        self._client = client
        self._tasks = tasks
        self._emit = emit
        self.version = client.protocol_version
        self.era = "modern" if self.version in MODERN_PROTOCOL_VERSIONS else "legacy"
        tools = client.server_capabilities.tools
        self.tools_list_changed = bool(tools and tools.list_changed)

    async def list_tools(self) -> list[str]:
        return [tool.name for tool in (await self._client.list_tools()).tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return text_of(await self._client.call_tool(name, arguments))

    async def listen(self) -> Any:
        opened = anyio.Event()
        outcome: dict[str, Any] = {}

        async def run() -> None:
            try:
                async with self._client.listen(tools_list_changed=True) as subscription:
                    outcome["id"] = subscription.subscription_id
                    opened.set()
                    async for event in subscription:
                        if isinstance(event, ToolsListChanged):
                            self._emit({"event": "list_changed", "list": "tools", "tag": subscription.subscription_id})
                self._emit({"event": "listen_closed", "cause": "graceful", "subscription": outcome["id"]})
            except Exception as e:  # noqa: BLE001 - reported to the driver
                if not opened.is_set():
                    outcome["error"] = e
                    opened.set()
                else:
                    self._emit(
                        {"event": "listen_closed", "cause": "lost", "subscription": outcome["id"], "error": error_of(e)}
                    )

        self._tasks.start_soon(run)
        await opened.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["id"]


@asynccontextmanager
async def open_session(command: dict[str, Any], emit):
    params = StdioServerParameters(
        command=command["command"], args=command["args"], env={**os.environ, **command.get("env", {})}
    )

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and tag_of(message) is None:
            emit({"event": "list_changed", "list": "tools", "tag": None})

    with bridge_errlog(command) as errlog:
        client = Client(
            stdio_client(params, errlog=errlog),
            mode="auto",
            cache=None,
            read_timeout_seconds=REQUEST_TIMEOUT,
            message_handler=on_message,
        )
        async with client:
            async with anyio.create_task_group() as tasks:
                yield Session(client, tasks, emit)
                tasks.cancel_scope.cancel()


if __name__ == "__main__":
    run_client(open_session)
