// A client made with the TypeScript SDK 1.x (@modelcontextprotocol/sdk,
// legacy era only): its Client and StdioClientTransport spawn the bridge as
// an MCP CLI would. Driven by driver.mjs through control.mjs.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { connectBridge, REQUEST_TIMEOUT, runClient, tagOf, textOf } from "./control.mjs";

runClient(async (command, emit) => {
  const client = new Client({ name: "sdk-client-ts1", version: "1.0.0" });
  client.setNotificationHandler(ToolListChangedNotificationSchema, async (n) =>
    emit({ event: "list_changed", list: "tools", tag: tagOf(n) }),
  );
  await connectBridge(client, StdioClientTransport, command);
  const options = { timeout: REQUEST_TIMEOUT };
  return {
    era: "legacy",
    version: null, // the 1.x client keeps no record of the negotiated version
    toolsListChanged: client.getServerCapabilities()?.tools?.listChanged === true,
    listTools: async () => (await client.listTools(undefined, options)).tools.map((t) => t.name),
    call: async (name, args) => textOf(await client.callTool({ name, arguments: args }, undefined, options)),
    listen: async () => {
      throw new Error("subscriptions/listen is not in the 1.x SDK");
    },
    close: () => client.close(),
  };
});
