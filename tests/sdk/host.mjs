// An MCP host built with the official TypeScript SDK, as an app would ship
// it: it listens on a Unix socket, reads the bridge's handshake line from
// each connection, then serves MCP (one `echo` tool) over the rest of it.
// Usage: node host.mjs SOCKET   (prints "ready" once listening)
import net from "node:net";
import fs from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const path = process.argv[2];
try {
  fs.unlinkSync(path); // a stale socket left by a killed instance
} catch {}

function serve(socket) {
  let head = Buffer.alloc(0);
  const onData = (chunk) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf(10);
    if (end < 0) return;
    socket.off("data", onData);
    socket.pause();
    const rest = head.subarray(end + 1);
    if (rest.length > 0) socket.unshift(rest);
    const server = new McpServer({ name: "sdk-host", version: "1.0.0" });
    server.registerTool(
      "echo",
      { description: "echoes", inputSchema: { text: z.string() } },
      async ({ text }) => ({ content: [{ type: "text", text: `${process.pid}:${text}` }] }),
    );
    server.connect(new StdioServerTransport(socket, socket)).then(() => socket.resume());
  };
  socket.on("data", onData);
  socket.on("error", () => {});
}

const listener = net.createServer(serve);
listener.listen(path, () => console.log("ready"));
