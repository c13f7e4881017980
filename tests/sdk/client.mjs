// One session of the official TypeScript SDK client through mcp-bridge, with
// the SDK-built host (host.mjs) stopped with SIGTERM and then SIGKILL twice,
// each time restarted on the same socket path: every call after each
// restart must succeed. Exit 0 on success, 1 with the reason on failure.
// Usage: node client.mjs BRIDGE_BINARY
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const bridge = process.argv[2];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mcp-sdk-"));
fs.chmodSync(dir, 0o700);
const socket = path.join(dir, "app.sock");
const here = path.dirname(new URL(import.meta.url).pathname);

function startHost() {
  return new Promise((resolve, reject) => {
    const host = spawn(process.execPath, [path.join(here, "host.mjs"), socket], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    host.stdout.once("data", () => resolve(host));
    host.once("exit", (code) => reject(new Error(`host exited early (${code})`)));
  });
}

function stop(host, signal) {
  return new Promise((resolve) => {
    host.removeAllListeners("exit");
    host.once("exit", () => resolve());
    host.kill(signal);
  });
}

// One `echo` call; its answer must come from a host, not be an error.
async function call(client, text) {
  const result = await client.callTool({ name: "echo", arguments: { text } }, undefined, {
    timeout: 20000,
  });
  const said = result.content?.[0]?.text ?? "";
  if (!result.isError && said.endsWith(`:${text}`)) return said;
  throw new Error(`unexpected result: ${JSON.stringify(result)}`);
}

let host = await startHost();
const transport = new StdioClientTransport({
  command: bridge,
  args: ["mcp-server", "--endpoint", socket, "--project", "p", "--requester", "sdk"],
  stderr: "inherit",
});
const client = new Client({ name: "sdk-client", version: "1.0.0" });
let failed = null;
try {
  await client.connect(transport);
  await call(client, "first");
  for (const [n, signal] of ["SIGTERM", "SIGKILL", "SIGKILL"].entries()) {
    await stop(host, signal);
    host = await startHost();
    // The host has exited and its successor listens before this call, so
    // the bridge has seen the hang-up: no "reconnecting" retry is allowed.
    const said = await call(client, `after-${n}`);
    if (!said.startsWith(`${host.pid}:`)) throw new Error(`answered by ${said}, not the new host`);
    const tools = await client.listTools();
    if (tools.tools[0]?.name !== "echo") throw new Error("tools/list after the restart");
  }
} catch (e) {
  failed = e;
}
await client.close().catch(() => {});
await stop(host, "SIGKILL");
fs.rmSync(dir, { recursive: true, force: true });
if (failed) {
  console.error(`failed: ${failed.stack ?? failed}`);
  process.exit(1);
}
process.exit(0);
