"""What every Python host here shares, whichever SDK line serves it.

A host removes a stale socket file, listens on the Unix socket path, prints
"ready", and on each connection reads the bridge's identity line
({"project":...,"requester":...} plus optional fields) before handing the rest
of the stream to an SDK-built server: through `line_transport`, the SDK's own
stdio framing over the socket, with the tools of `add_tools`.

    python hosts/pyN.py SOCKET      listen at once, print "ready"
    python hosts/pyN.py --zygote    driver.mjs's launcher, below

Why a zygote: importing the SDK costs a Python 2.x process over a second of
CPU, and the scenarios start about a hundred host instances per run on a
2-core machine. The zygote imports once, then forks one child per instance
on the driver's command ({"sock": PATH} on stdin); each child is a real,
separate process that the driver SIGKILLs or SIGTERMs by pid. A child is
forked ahead of its moment and listens on SIGUSR1, so that the endpoint
opens when the scenario says however busy the machine is. The zygote writes
{"forked": pid, "sock": ...} when it forked, the child {"held": pid} once it
waits for SIGUSR1 and {"ready": pid, "sock": ...} once it listens, and the
zygote {"exit": pid} when it has reaped one; all of them single os.write
calls of one line, so the lines never interleave on the shared pipe.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

# The longest line a host accepts: a JSON-RPC message of the scenarios is a
# few KiB; the identity line a few hundred bytes.
MAX_LINE = 16 * 1024 * 1024

Serve = Callable[[AsyncIterator[bytes], anyio.abc.ByteStream, dict[str, Any]], Awaitable[None]]


def say(message: dict[str, Any]) -> None:
    """One JSON line on stdout, in one write (see the module doc)."""
    os.write(1, (json.dumps(message) + "\n").encode())


def add_tools(app: Any, identity: dict[str, Any]) -> None:
    """The scenarios' tools, on a FastMCP (1.x) or MCPServer (2.x): same decorator.

    `echo` returns its text; `whoami` who the bridge said it is (the identity
    line's project and requester) and which instance answers (this pid).
    """

    @app.tool()
    def echo(text: str) -> str:
        """Returns its text."""
        return text

    @app.tool(name="whoami")
    def who() -> str:
        """Who the bridge said it is."""
        said = {"project": identity.get("project"), "requester": identity.get("requester")}
        return json.dumps({**said, "pid": os.getpid()})


@asynccontextmanager
async def line_transport(
    received: AsyncIterator[bytes],
    stream: anyio.abc.ByteStream,
    parse: Callable[[bytes], Any],
    dump: Callable[[Any], str],
    streams: Callable[[], tuple[tuple[Any, Any], tuple[Any, Any]]],
):
    """An SDK server's streams over the socket, the way its stdio_server makes them.

    One message per line each way: a reader task parses each line into a
    SessionMessage (or the exception, which the SDK's server reports), a
    writer task writes each SessionMessage as one line. `streams` makes the
    SDK line's (read, write) memory stream pairs.
    """
    (read_writer, read_stream), (write_stream, write_reader) = streams()

    async def reader() -> None:
        async with read_writer:
            async for line in received:
                try:
                    message = parse(line)
                except Exception as exc:  # noqa: BLE001 - the SDK's server reports it
                    await read_writer.send(exc)
                    continue
                await read_writer.send(message)

    async def writer() -> None:
        async with write_reader:
            async for message in write_reader:
                await stream.send(dump(message).encode() + b"\n")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        yield read_stream, write_stream
        tasks.cancel_scope.cancel()


async def lines(received: BufferedByteReceiveStream) -> AsyncIterator[bytes]:
    """The newline-delimited messages of a stream, until it ends or breaks."""
    while True:
        try:
            yield await received.receive_until(b"\n", MAX_LINE)
        except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return


async def listen(path: str, serve: Serve, on_ready: Callable[[], None]) -> None:
    """Listen on `path` and serve each bridge that connects."""
    try:
        os.unlink(path)  # a stale socket left by a killed instance
    except FileNotFoundError:
        pass
    listener = await anyio.create_unix_listener(path)

    async def connection(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received = BufferedByteReceiveStream(stream)
            try:
                identity = json.loads(await received.receive_until(b"\n", MAX_LINE))
            except Exception as e:  # noqa: BLE001 - not a bridge: drop it, keep serving
                print(f"host: no identity line: {e!r}", file=sys.stderr)
                return
            try:
                await serve(lines(received), stream, identity)
            except Exception as e:  # noqa: BLE001 - one connection's end never ends the host
                print(f"host: connection ended: {e!r}", file=sys.stderr)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, connection)
        on_ready()
        if os.environ.get("MCP_SDK_ZYGOTE_PID"):
            tasks.start_soon(exit_with_zygote, int(os.environ["MCP_SDK_ZYGOTE_PID"]))


async def held(path: str, serve: Serve) -> None:
    """A forked host: say it is held, listen on SIGUSR1 (see the module doc)."""
    with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
        say({"held": os.getpid()})
        async for _ in signals:
            break
    await listen(path, serve, lambda: say({"ready": os.getpid(), "sock": path}))


async def exit_with_zygote(zygote: int) -> None:
    """A forked host outlives no killed zygote (and so no killed driver)."""
    while os.getppid() == zygote:
        await anyio.sleep(1)
    os._exit(0)


def main(serve: Serve) -> None:
    """A host's entry point: `pyN.py SOCKET` or `pyN.py --zygote` (see the module doc)."""
    if sys.argv[1:] == ["--zygote"]:
        zygote(serve)
    elif len(sys.argv) == 2:
        anyio.run(listen, sys.argv[1], serve, lambda: print("ready", flush=True))
    else:
        sys.exit("usage: host.py SOCKET | --zygote")


def zygote(serve: Serve) -> None:
    children: set[int] = set()

    def reap(_signum: int, _frame: object) -> None:
        # Every child that ended, known or not yet (it may end before the
        # fork's caller has recorded it): the driver matches by pid.
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            say({"exit": pid})

    signal.signal(signal.SIGCHLD, reap)
    say({"loaded": os.getpid()})
    for line in sys.stdin:
        path = json.loads(line)["sock"]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.environ["MCP_SDK_ZYGOTE_PID"] = str(os.getppid())
            try:
                anyio.run(held, path, serve)
            finally:
                os._exit(0)
        children.add(pid)
        say({"forked": pid, "sock": path})
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
