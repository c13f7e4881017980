"""The command loop every Python client here runs (the twin of control.mjs).

The driver (driver.mjs) writes one JSON command per line on stdin,
{"id":N,"session":S,"op":...}, and gets one JSON answer per command on
stdout, {"id":N,"ok":true,...} or {"id":N,"ok":false,"error":{code,message,
data}}, each with "ms", how long the command took from its receipt (so a busy
driver does not count), plus events {"session":S,"event":"list_changed"|
"listen_closed",...} as they happen. Commands run concurrently (a held
request must not block the next one), and one client process serves many
sessions, each its own bridge, as a CLI runs many MCP servers: the SDK is
imported once per run.

An SDK line provides `open_session(command, emit)`: an async context manager
that connects one session and yields an object with `era`, `version`,
`tools_list_changed` and the coroutines `list_tools()`, `call(name, args)`
and `listen()`; leaving it closes the session (the bridge sees EOF).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import anyio

# How long one request may take before the SDK gives up on it (seconds).
REQUEST_TIMEOUT = 20.0

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def say(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def error_of(e: BaseException) -> dict[str, Any]:
    """An SDK error as the driver sees it: the JSON-RPC error's fields when it was one.

    Task groups wrap what a session raised in exception groups: the first
    leaf is the error.
    """
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    error = getattr(e, "error", None)  # McpError / MCPError carry the ErrorData
    if error is not None and hasattr(error, "code"):
        return {"code": error.code, "message": error.message, "data": error.data, "type": type(e).__name__}
    return {"code": None, "message": str(e) or repr(e), "data": None, "type": type(e).__name__}


def text_of(result: Any) -> dict[str, Any]:
    """The text of a tools/call result, and whether the tool said it failed."""
    content = result.content[0].text if result.content else ""
    return {"text": content, "isError": bool(result.is_error if hasattr(result, "is_error") else result.isError)}


def tag_of(notification: Any) -> Any:
    """The subscription id a modern notification is tagged with, or None."""
    params = getattr(notification, "params", None)
    meta = getattr(params, "meta", None) if params is not None else None
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(SUBSCRIPTION_ID)
    extra = getattr(meta, "model_extra", None) or {}
    return extra.get(SUBSCRIPTION_ID)


def bridge_errlog(command: dict[str, Any]):
    """Where the bridge's stderr goes: the file the driver named."""
    return open(command["stderr"], "a")


def since(started: float) -> int:
    """Milliseconds since `started` (anyio's clock)."""
    return round((anyio.current_time() - started) * 1000)


def run_client(open_session: Callable[..., Any]) -> None:
    anyio.run(_loop, open_session)


async def _loop(open_session: Callable[..., Any]) -> None:
    sessions: dict[str, Any] = {}
    closers: dict[str, anyio.Event] = {}
    closed: dict[str, anyio.Event] = {}

    async def hold(command: dict[str, Any], started: float, connected: Callable[[Any], None]) -> None:
        name = command["session"]
        closers[name] = anyio.Event()
        closed[name] = anyio.Event()
        try:
            async with open_session(command, lambda event: say({"session": name, **event})) as session:
                sessions[name] = session
                connected(None)
                say(
                    {
                        "id": command["id"],
                        "ok": True,
                        "era": session.era,
                        "version": session.version,
                        "toolsListChanged": session.tools_list_changed,
                        "ms": since(started),
                    }
                )
                await closers[name].wait()
        except BaseException as e:  # noqa: BLE001 - reported to the driver, the loop goes on
            if isinstance(e, anyio.get_cancelled_exc_class()):
                raise
            connected(e)
        finally:
            sessions.pop(name, None)
            closed[name].set()

    async def run(command: dict[str, Any], tasks: anyio.abc.TaskGroup) -> None:
        name, op = command.get("session"), command.get("op")
        started = anyio.current_time()
        try:
            if op == "connect":
                outcome: list[BaseException | None] = []
                done = anyio.Event()

                def connected(e: BaseException | None) -> None:
                    if not done.is_set():
                        outcome.append(e)
                        done.set()

                tasks.start_soon(hold, command, started, connected)
                await done.wait()
                if outcome[0] is not None:
                    raise outcome[0]
                return  # hold() answered
            session = sessions.get(name)
            if session is None:
                raise RuntimeError(f"no session {name}")
            if op == "list_tools":
                result: dict[str, Any] = {"tools": await session.list_tools()}
            elif op == "call":
                result = await session.call(command["name"], command.get("arguments") or {})
            elif op == "listen":
                result = {"subscription": await session.listen()}
            elif op == "close":
                closers[name].set()
                await closed[name].wait()
                result = {}
            else:
                raise RuntimeError(f"unknown op {op}")
            say({"id": command["id"], "ok": True, **result, "ms": since(started)})
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            say({"id": command["id"], "ok": False, "error": error_of(e), "ms": since(started)})

    stdin = anyio.wrap_file(sys.stdin)
    async with anyio.create_task_group() as tasks:
        async for line in stdin:
            try:
                command = json.loads(line)
            except ValueError:
                continue
            tasks.start_soon(run, command, tasks)
        for closer in closers.values():
            closer.set()
