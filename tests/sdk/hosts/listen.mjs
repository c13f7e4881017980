// What every Node host here does before MCP: remove a stale socket file,
// listen on the Unix socket path, print "ready", and on each connection read
// the bridge's identity line ({"project":…,"requester":…} plus optional
// fields) before handing the rest of the stream to an SDK-built server.
//
// Usage of a host: node hosts/tsN.mjs SOCKET [--hold]
// With --hold the host loads its SDK, prints "loaded", and listens only when
// a line arrives on stdin: the driver starts the process early and opens the
// endpoint at the moment a scenario says, whatever node's start-up costs on a
// busy machine. A held host exits when its stdin closes, so that it never
// outlives the driver.
import fs from "node:fs";
import net from "node:net";

// The longest identity line a host accepts; the bridge's is a few hundred
// bytes, so more means the stream is not a bridge.
const MAX_IDENTITY = 64 * 1024;

/** Runs a host: `serve(socket, identity)` starts an MCP server on each connection. */
export async function runHost(serve) {
  const path = process.argv[2];
  if (!path) {
    console.error("usage: host SOCKET [--hold]");
    process.exit(2);
  }
  if (process.argv.includes("--hold")) {
    console.log("loaded");
    process.stdin.on("end", () => process.exit(0));
    await new Promise((resolve) => process.stdin.once("data", resolve));
  }
  try {
    fs.unlinkSync(path); // a stale socket left by a killed instance
  } catch {}
  const listener = net.createServer((socket) => {
    socket.on("error", () => {});
    readIdentity(socket).then(
      ({ identity, rest }) => {
        if (rest.length > 0) socket.unshift(rest);
        return serve(socket, identity);
      },
      (e) => {
        console.error(`host: ${e.message}`);
        socket.destroy();
      },
    );
  });
  listener.listen(path, () => console.log("ready"));
}

/** The identity line, parsed, and what followed it in the same chunk. */
function readIdentity(socket) {
  return new Promise((resolve, reject) => {
    let head = Buffer.alloc(0);
    const onData = (chunk) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf(10);
      if (end < 0) {
        if (head.length > MAX_IDENTITY) fail(new Error("no identity line"));
        return;
      }
      socket.off("data", onData);
      socket.off("end", onEnd);
      socket.pause();
      try {
        const identity = JSON.parse(head.subarray(0, end).toString("utf8"));
        resolve({ identity, rest: head.subarray(end + 1) });
      } catch (e) {
        reject(new Error(`bad identity line: ${e.message}`));
      }
    };
    const onEnd = () => fail(new Error("closed before the identity line"));
    const fail = (e) => {
      socket.off("data", onData);
      socket.off("end", onEnd);
      reject(e);
    };
    socket.on("data", onData);
    socket.on("end", onEnd);
  });
}

/** What `whoami` answers: who the bridge said it is, and which instance answers. */
export function whoami(identity) {
  return JSON.stringify({ project: identity.project, requester: identity.requester, pid: process.pid });
}
