// An MCP host built with the TypeScript SDK 1.x (@modelcontextprotocol/sdk,
// legacy era only), as an app would ship it: one McpServer per bridge
// connection, over a StdioServerTransport on the socket stream
// (newline-delimited JSON-RPC, the stdio framing). Tools: `echo` (its text)
// and `whoami` (the identity line's project and requester, and this pid);
// the SDK declares tools `listChanged: true`.
// Usage: node hosts/ts1.mjs SOCKET [--hold]   (see listen.mjs)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { runHost, whoami } from "./listen.mjs";

await runHost(async (socket, identity) => {
  const server = new McpServer({ name: "sdk-host-ts1", version: "1.0.0" });
  server.registerTool(
    "echo",
    { description: "returns its text", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  server.registerTool("whoami", { description: "who the bridge said it is" }, async () => ({
    content: [{ type: "text", text: whoami(identity) }],
  }));
  await server.connect(new StdioServerTransport(socket, socket));
  socket.resume();
});
