// An MCP host built with the TypeScript SDK 2.x (@modelcontextprotocol/server,
// both eras): serveStdio over a StdioServerTransport on each bridge
// connection's socket stream, the SDK's own custom-transport path. The
// connection's first message decides the era (server/discover or a request
// with the modern _meta envelope: modern; initialize: legacy), and the SDK
// serves subscriptions/listen on modern connections. Tools: `echo` and
// `whoami` as in ts1.mjs; tools `listChanged: true`.
// Usage: node hosts/ts2.mjs SOCKET [--hold]   (see listen.mjs)
import { McpServer } from "@modelcontextprotocol/server";
import { serveStdio, StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { z } from "zod";
import { runHost, whoami } from "./listen.mjs";

await runHost(async (socket, identity) => {
  const factory = () => {
    const server = new McpServer(
      { name: "sdk-host-ts2", version: "2.0.0" },
      { capabilities: { tools: { listChanged: true } } },
    );
    server.registerTool(
      "echo",
      { description: "returns its text", inputSchema: z.object({ text: z.string() }) },
      async ({ text }) => ({ content: [{ type: "text", text }] }),
    );
    server.registerTool("whoami", { description: "who the bridge said it is" }, async () => ({
      content: [{ type: "text", text: whoami(identity) }],
    }));
    return server;
  };
  serveStdio(factory, { transport: new StdioServerTransport(socket, socket) });
  socket.resume();
});
