"""The Python SDK 2.x client (`mcp` 2.3) in its default mode against a
legacy server that hangs up on its probe, through the bridge.

`python py2_probe.py <bridge> <bridge args...>`: spawns the bridge as its
stdio server, exactly as an MCP CLI would, with `Client` in its default
mode (auto: a `server/discover` probe on the same process, then
`initialize` after any error or no answer in 10 s). Lists the tools and
calls `echo`; prints `ok <milliseconds the start took>` and exits 0 only
if both were answered as legacy-app (rmcp 2.x) answers them. Run by
src/bin/probe.rs, which checks the time against the probe budget.
"""

from __future__ import annotations

import sys
import time

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

# Every step waits at most this long, so that a hung step fails.
STEP_LIMIT = 30.0


async def main(command: str, args: list[str]) -> None:
    params = StdioServerParameters(command=command, args=args)
    started = time.monotonic()
    with anyio.fail_after(STEP_LIMIT):
        # No mode given: the default (auto) is what is under test.
        async with Client(stdio_client(params), cache=None) as client:
            took = time.monotonic() - started
            print(f"python: session started in {took * 1000:.0f} ms, protocol {client.protocol_version}")
            names = [tool.name for tool in (await client.list_tools()).tools]
            print(f"python: tools/list -> {names}")
            if names != ["echo"]:
                raise SystemExit(f"tools/list gave {names}")
            result = await client.call_tool("echo", {"text": "past the probe"})
            texts = [part.text for part in result.content if getattr(part, "type", None) == "text"]
            print(f"python: tools/call echo -> {texts}")
            if result.is_error or texts != ["past the probe"]:
                raise SystemExit(f"tools/call gave {result}")
    print(f"ok {took * 1000:.0f}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2:])
