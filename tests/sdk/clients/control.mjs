// The command loop every Node client here runs: the driver (driver.mjs)
// writes one JSON command per line on stdin, {"id":N,"session":S,"op":…},
// and gets one JSON answer per command on stdout, {"id":N,"ok":true,…} or
// {"id":N,"ok":false,"error":{code,message,data}}, each with "ms", how long
// the command took from its receipt (so a busy driver does not count), plus
// events
// {"session":S,"event":"list_changed"|"listen_closed",…} as they happen.
// Commands run concurrently (a held request must not block the next one),
// and one client process serves many sessions, each its own bridge, as a CLI
// runs many MCP servers: the SDK is loaded once per run, not once per session.
//
// An SDK line provides `open(params, emit)`, connecting one session and
// returning { era, version, toolsListChanged, listTools(), call(name, args),
// listen(), close() }.
import fs from "node:fs";
import readline from "node:readline";

/** How long one request may take before the SDK gives up on it (ms). */
export const REQUEST_TIMEOUT = 20000;

export function runClient(open) {
  const sessions = new Map();
  const write = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);
  const handle = async (command) => {
    const { session: name, op } = command;
    if (op === "connect") {
      const session = await open(command, (event) => write({ session: name, ...event }));
      sessions.set(name, session);
      const { era, version, toolsListChanged } = session;
      return { era, version, toolsListChanged };
    }
    const session = sessions.get(name);
    if (!session) throw new Error(`no session ${name}`);
    if (op === "list_tools") return { tools: await session.listTools() };
    if (op === "call") return await session.call(command.name, command.arguments ?? {});
    if (op === "listen") return { subscription: await session.listen() };
    if (op === "close") {
      sessions.delete(name);
      await session.close();
      return {};
    }
    throw new Error(`unknown op ${op}`);
  };
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    let command;
    try {
      command = JSON.parse(line);
    } catch {
      return;
    }
    const started = Date.now();
    handle(command).then(
      (result) => write({ id: command.id, ok: true, ...result, ms: Date.now() - started }),
      (e) => write({ id: command.id, ok: false, error: errorOf(e), ms: Date.now() - started }),
    );
  });
  process.stdin.on("end", async () => {
    await Promise.all([...sessions.values()].map((s) => s.close().catch(() => {})));
    process.exit(0);
  });
}

/** An SDK error as the driver sees it: the JSON-RPC error's fields when it was one. */
export function errorOf(e) {
  return {
    code: e?.code ?? null,
    message: String(e?.message ?? e),
    data: e?.data ?? null,
    type: e?.constructor?.name ?? typeof e,
  };
}

/** The text of a tools/call result, or a failure when the tool said it failed. */
export function textOf(result) {
  return { text: result.content?.[0]?.text ?? "", isError: result.isError === true };
}

/** The subscription id a modern notification is tagged with, or null. */
export function tagOf(notification) {
  return notification?.params?._meta?.["io.modelcontextprotocol/subscriptionId"] ?? null;
}

/** Connects `client` through the SDK's stdio transport class `Transport`,
 * which spawns the bridge the driver described (its stderr to the file the
 * driver named). A client that failed to connect is closed in the
 * background: closing waits for the bridge to exit, and the error is the
 * answer now. */
export async function connectBridge(client, Transport, command) {
  const stderr = fs.openSync(command.stderr, "a");
  const transport = new Transport({
    command: command.command,
    args: command.args,
    env: { ...process.env, ...(command.env ?? {}) },
    stderr,
  });
  try {
    await client.connect(transport, { timeout: REQUEST_TIMEOUT });
  } catch (e) {
    client.close().catch(() => {});
    throw e;
  } finally {
    fs.closeSync(stderr); // the bridge has its own
  }
}
