// A client made with the TypeScript SDK 2.x (@modelcontextprotocol/client,
// both eras): versionNegotiation mode 'auto', as a dual-era CLI is
// configured (the SDK's default is still 'legacy'), so it probes with
// server/discover on a short-lived sibling bridge process and then speaks
// modern to a modern server, or legacy after any other answer. Its
// StdioClientTransport spawns the bridge as an MCP CLI would. Driven by
// driver.mjs through control.mjs.
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { connectBridge, REQUEST_TIMEOUT, runClient, tagOf, textOf } from "./control.mjs";

runClient(async (command, emit) => {
  const client = new Client(
    { name: "sdk-client-ts2", version: "2.0.0" },
    { versionNegotiation: { mode: "auto" } },
  );
  client.setNotificationHandler("notifications/tools/list_changed", async (n) =>
    emit({ event: "list_changed", list: "tools", tag: tagOf(n) }),
  );
  await connectBridge(client, StdioClientTransport, command);
  const options = { timeout: REQUEST_TIMEOUT };
  return {
    era: client.getProtocolEra(),
    version: client.getNegotiatedProtocolVersion() ?? null,
    toolsListChanged: client.getServerCapabilities()?.tools?.listChanged === true,
    // "bypass": every tools/list goes through the bridge, never the SDK's
    // response cache.
    listTools: async () =>
      (await client.listTools(undefined, { ...options, cacheMode: "bypass" })).tools.map((t) => t.name),
    call: async (name, args) => textOf(await client.callTool({ name, arguments: args }, options)),
    listen: async () => {
      // The ack must come however long the app takes (a listen held while
      // the app is absent stays open), so no ack timeout shorter than the
      // driver's hang guard.
      const opening = client.listen({ toolsListChanged: true }, { timeout: 120000 });
      // The listen's JSON-RPC id, which tags its notifications: the SDK
      // numbers them `listen:N` from a counter it bumps before sending.
      const id = `listen:${client._nextListenId - 1}`;
      const subscription = await opening;
      subscription.closed.then((cause) => emit({ event: "listen_closed", cause, subscription: id }));
      return id;
    },
    close: () => client.close(),
  };
});
