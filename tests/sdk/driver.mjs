// The scenario driver of the SDK interop suite (run.sh calls it):
//   node driver.mjs BRIDGE_BINARY [RUNS] [FILTER]
// runs every scenario of the matrix RUNS times (default 3), prints one line
// per cell (scenario, client SDK, host SDK) with its pass and fail counts,
// then the total, and exits 1 if any run failed. FILTER (a substring of
// "scenario client host", e.g. "b-restart ts2") narrows the matrix.
//
// The matrix: clients and hosts of four SDK lines, TypeScript 1.x (ts1,
// legacy), TypeScript 2.x (ts2, both eras), Python 1.x (py1, legacy) and
// Python 2.x (py2, both eras). Every client against every host: the legacy
// clients speak legacy to all; the 2.x clients speak modern to the 2.x
// hosts and must fall back to legacy against the 1.x hosts. Scenario e
// needs no host, so it runs once per client.
//
// The processes: one client process per SDK line for the whole run
// (clients/*, each session its own bridge, as a CLI runs many servers); one
// host process per instance (hosts/*): Node hosts start early and listen on
// a line on stdin, Python hosts fork from one zygote per SDK line (see
// hosts/listen.py), so that the moment an endpoint opens is the scenario's,
// not the machine's. Scenarios run a few at a time: most of their time is
// the waiting they are about.
//
// The bridge gets --cache-dir only if its --help names it (a bridge without
// it would refuse every command line, and every scenario would fail for
// that instead of for what it checks); the cache directory is always given
// as MCP_BRIDGE_CACHE_DIR too, so that no run touches the user's cache.
//
// Environment: SDK_PARALLEL (runs at once, default 6), SDK_TRACE=1 (each
// step of each run on stderr, timed), SDK_KEEP=1 (keep the work directory:
// sockets, caches, each bridge's stderr, the hosts' and clients' logs).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

const here = path.dirname(new URL(import.meta.url).pathname);
const [bridge, runsArg, filter = ""] = process.argv.slice(2);
if (!bridge) {
  console.error("usage: node driver.mjs BRIDGE_BINARY [RUNS] [FILTER]");
  process.exit(2);
}
const RUNS = Number(runsArg ?? 3);

const SDKS = ["ts1", "ts2", "py1", "py2"];
const DUAL_ERA = new Set(["ts2", "py2"]);
// The reasons an error of the bridge's may name (docs/bridge.md's table of
// `data.reason`s, but the rows marked otherwise in parentheses; read as
// tests/support/mod.rs's documented_reasons reads it).
const REASONS = new Set(
  fs.readFileSync(new URL("../../docs/bridge.md", import.meta.url), "utf8")
    .split("| `data.reason` | meaning |\n|---|---|\n")[1]
    .split("\n")
    .filter((line, i, lines) => lines.slice(0, i + 1).every((l) => l.startsWith("| `")))
    .filter((line) => !line.includes("` | ("))
    .map((line) => line.split("`")[1]),
);
// A scenario that has not ended by then is killed and counted failed.
const HANG_GUARD_MS = 60000;
// How many scenarios run at once: enough to overlap their waits (d waits
// 8 s for its app), few enough that 2 cores keep the timings they check
// honest.
const PARALLEL = Number(process.env.SDK_PARALLEL ?? 6);
// How long an event the scenario expects (a list_changed after a resume)
// may take.
const EVENT_WAIT_MS = 10000;

// Whether this bridge knows --cache-dir (see the top of this file).
const help = spawnSync(bridge, ["--help"], { encoding: "utf8" });
const CACHE_FLAG = `${help.stdout}${help.stderr}`.includes("--cache-dir");

const workDir = fs.mkdtempSync(path.join(os.tmpdir(), "mcp-sdk-"));
fs.chmodSync(workDir, 0o700);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A failed expectation: the message is the one line the report shows. */
class Failure extends Error {}
function expect(condition, message) {
  if (!condition) throw new Failure(message);
}

/** Lines of JSON from a child's stdout, to `onMessage`. */
function jsonLines(stream, onMessage) {
  readline.createInterface({ input: stream }).on("line", (line) => {
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      return;
    }
    onMessage(message);
  });
}

function python(sdk) {
  return path.join(here, `.venv-${sdk}`, "bin", "python");
}

// ---------------------------------------------------------------- clients

/** One long-lived client process of an SDK line, speaking control.mjs / control.py. */
class ClientProcess {
  constructor(sdk) {
    this.sdk = sdk;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    const [command, args] = sdk.startsWith("ts")
      ? [process.execPath, [path.join(here, "clients", `${sdk}.mjs`)]]
      : [python(sdk), [path.join(here, "clients", `${sdk}.py`)]];
    const log = fs.openSync(path.join(workDir, `client-${sdk}.log`), "a");
    this.child = spawn(command, args, { stdio: ["pipe", "pipe", log] });
    this.child.stdin.on("error", () => {});
    this.dead = false;
    jsonLines(this.child.stdout, (message) => this.receive(message));
    this.child.once("exit", (code, signal) => {
      this.dead = true;
      for (const { reject } of this.pending.values()) {
        reject(new Failure(`the ${sdk} client process exited (${signal ?? code})`));
      }
      this.pending.clear();
    });
  }

  receive(message) {
    if (message.event !== undefined) {
      this.listeners.get(message.session)?.(message);
    } else if (message.id !== undefined) {
      const waiter = this.pending.get(message.id);
      this.pending.delete(message.id);
      waiter?.resolve(message);
    }
  }

  /** Sends a command; resolves with the answer (ok or not), rejects if none comes. */
  request(command, timeoutMs = 30000) {
    if (this.dead) return Promise.reject(new Failure(`the ${this.sdk} client process is gone`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Failure(`no answer to ${command.op} within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (m) => (clearTimeout(timer), resolve(m)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.child.stdin.write(`${JSON.stringify({ id, ...command })}\n`);
    });
  }

  kill() {
    this.child.kill("SIGKILL");
  }
}

const clients = new Map();
function clientProcess(sdk) {
  let client = clients.get(sdk);
  if (!client || client.dead) {
    client = new ClientProcess(sdk);
    clients.set(sdk, client);
  }
  return client;
}

// ------------------------------------------------------------------ hosts

/** A Node host instance: started with --hold, listens when told. */
class NodeHost {
  constructor(sdk, sock, log) {
    this.sdk = sdk;
    this.child = spawn(process.execPath, [path.join(here, "hosts", `${sdk}.mjs`), sock, "--hold"], {
      stdio: ["pipe", "pipe", log],
    });
    this.child.stdin.on("error", () => {});
    this.pid = this.child.pid;
    this.exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.lines = [];
    this.waiters = [];
    readline.createInterface({ input: this.child.stdout }).on("line", (line) => {
      this.lines.push(line);
      for (const w of this.waiters.splice(0)) w();
    });
    this.gone = false;
    this.exited.then(() => {
      this.gone = true;
      for (const w of this.waiters.splice(0)) w();
    });
  }

  async line(text) {
    for (;;) {
      if (this.lines.includes(text)) return;
      if (this.gone) throw new Failure(`the ${this.sdk} host exited before saying "${text}"`);
      await new Promise((resolve) => this.waiters.push(resolve));
    }
  }

  prepare() {
    return this.line("loaded");
  }

  async listen() {
    await this.prepare();
    this.child.stdin.write("listen\n");
    await this.line("ready");
  }

  async kill(signal) {
    if (!this.gone) this.child.kill(signal);
    await this.exited;
  }
}

/** The zygote of a Python SDK line (hosts/listen.py), forking host instances. */
class Zygote {
  constructor(sdk) {
    this.sdk = sdk;
    const log = fs.openSync(path.join(workDir, `hosts-${sdk}.log`), "a");
    this.child = spawn(python(sdk), [path.join(here, "hosts", `${sdk}.py`), "--zygote"], {
      stdio: ["pipe", "pipe", log],
    });
    this.child.stdin.on("error", () => {});
    this.dead = false;
    this.events = [];
    this.waiters = [];
    const wake = () => {
      for (const w of this.waiters.splice(0)) w();
    };
    jsonLines(this.child.stdout, (m) => {
      this.events.push(m);
      wake();
    });
    this.child.once("exit", () => {
      this.dead = true;
      wake();
    });
  }

  /** Waits for the first event from index `from` on that `match` accepts;
   * resolves with its index. */
  async event(match, from, what) {
    for (;;) {
      const found = this.events.findIndex((m, i) => i >= from && match(m));
      if (found >= 0) return found;
      if (this.dead) throw new Failure(`the ${this.sdk} zygote exited while waiting for ${what}`);
      await new Promise((resolve) => this.waiters.push(resolve));
    }
  }

  fork(sock) {
    this.child.stdin.write(`${JSON.stringify({ sock })}\n`);
  }

  close() {
    this.child.stdin.end();
  }
}

const zygotes = new Map();
function zygote(sdk) {
  let z = zygotes.get(sdk);
  if (!z || z.dead) {
    z = new Zygote(sdk);
    zygotes.set(sdk, z);
  }
  return z;
}

/** A Python host instance: a fork of its SDK's zygote, a process of its
 * own, forked when prepared and listening on SIGUSR1 (hosts/listen.py). */
class ForkedHost {
  constructor(sdk, sock) {
    this.sdk = sdk;
    this.sock = sock;
    this.zygote = zygote(sdk);
    this.pid = null;
    // Where this instance's events start in the zygote's (pids are reused;
    // the child's exit may be reaped, and said, even before its fork is).
    this.from = 0;
  }

  async prepare() {
    if (this.pid !== null) return;
    await this.zygote.event((m) => m.loaded !== undefined, 0, "its start");
    this.from = this.zygote.events.length;
    this.zygote.fork(this.sock);
    const forked = await this.zygote.event((m) => m.forked !== undefined && m.sock === this.sock, this.from, "a fork");
    this.pid = this.zygote.events[forked].forked;
    await this.said("held", "its host to start");
  }

  /** Waits for the child's `what` line, failing if it exits first. */
  async said(what, waiting) {
    const found = await this.zygote.event((m) => m[what] === this.pid || m.exit === this.pid, this.from, waiting);
    expect(this.zygote.events[found][what] === this.pid, `the ${this.sdk} host exited (${waiting})`);
  }

  async listen() {
    await this.prepare();
    process.kill(this.pid, "SIGUSR1");
    await this.said("ready", "its host to listen");
  }

  async kill(signal) {
    if (this.pid === null) return;
    try {
      process.kill(this.pid, signal);
    } catch {}
    await this.zygote.event((m) => m.exit === this.pid, this.from, "its host to exit");
  }
}

// -------------------------------------------------------------- scenarios

/** One run of one scenario: its directory, its sessions, its hosts. */
class Run {
  constructor(scenario, client, host, round) {
    this.scenario = scenario;
    this.client = client;
    this.host = host;
    this.name = `${scenario.name}-${client}-${host}-${round}`;
    this.dir = path.join(workDir, this.name);
    fs.mkdirSync(this.dir, { mode: 0o700 });
    this.sock = path.join(this.dir, "app.sock");
    this.cacheDir = path.join(this.dir, "cache");
    this.project = `project-${this.name}`;
    this.requester = `${client}-agent`;
    this.hosts = [];
    this.sessions = [];
    this.began = Date.now();
    this._step = "start";
    this.hostLog = fs.openSync(path.join(this.dir, "host.log"), "a");
  }

  /** What the run is doing, for a failure's report (and SDK_TRACE=1's). */
  get step() {
    return this._step;
  }

  set step(what) {
    if (process.env.SDK_TRACE) console.error(`${((Date.now() - this.began) / 1000).toFixed(2)} ${this.name}: ${what}`);
    this._step = what;
  }

  /** The era the client must end up in. */
  get modern() {
    return DUAL_ERA.has(this.client) && DUAL_ERA.has(this.host);
  }

  /** A host instance of this run's SDK, started and loaded, not yet listening. */
  async newHost() {
    expect(!this.ended, "the run was ended");
    const h = this.host.startsWith("ts")
      ? new NodeHost(this.host, this.sock, this.hostLog)
      : new ForkedHost(this.host, this.sock);
    this.hosts.push(h);
    await h.prepare();
    return h;
  }

  /** The bridge's command line, as an MCP CLI writes it. */
  bridgeCommand(options = {}) {
    const args = ["mcp-server", "--endpoint", this.sock, "--project", this.project, "--requester", this.requester];
    if (CACHE_FLAG) args.push("--cache-dir", this.cacheDir);
    if (options.connectTimeout !== undefined) args.push("--connect-timeout", String(options.connectTimeout));
    if (options.reconnectTimeout !== undefined) args.push("--reconnect-timeout", String(options.reconnectTimeout));
    return {
      command: bridge,
      args,
      env: { MCP_BRIDGE_CACHE_DIR: this.cacheDir },
      stderr: path.join(this.dir, `bridge-${this.sessions.length}.stderr`),
    };
  }

  /** Connects a session; resolves with it, or rejects with the connect's error. */
  async connect(options = {}) {
    const session = new Session(this, `${this.name}/${this.sessions.length}`, options);
    this.sessions.push(session);
    await session.connect();
    return session;
  }

  /** Ends the run: its sessions closed, its hosts killed, none started after. */
  async cleanup() {
    this.ended = true;
    await Promise.all(this.sessions.map((s) => s.close().catch(() => {})));
    await Promise.all(this.hosts.map((h) => h.kill("SIGKILL").catch(() => {})));
    fs.closeSync(this.hostLog);
  }

  /** The last lines the bridges of this run wrote on stderr, for a failure's report. */
  bridgeStderr() {
    const out = [];
    for (const file of fs.readdirSync(this.dir).filter((f) => f.endsWith(".stderr")).sort()) {
      const lines = fs.readFileSync(path.join(this.dir, file), "utf8").trim().split("\n").filter(Boolean);
      for (const line of lines.slice(-3)) out.push(`${file}: ${line}`);
    }
    return out;
  }
}

/** One client session: one bridge process, spawned by the client SDK's stdio transport. */
class Session {
  constructor(run, name, options) {
    this.run = run;
    this.name = name;
    this.options = options;
    this.client = clientProcess(run.client);
    this.events = [];
    this.waiters = [];
    this.closed = false;
    this.client.listeners.set(name, (event) => {
      this.events.push(event);
      for (const w of this.waiters.splice(0)) w();
    });
  }

  async connect() {
    const answer = await this.client.request(
      { session: this.name, op: "connect", ...this.run.bridgeCommand(this.options) },
      HANG_GUARD_MS,
    );
    this.connectMs = answer.ms;
    if (!answer.ok) throw new RequestError("connect", answer.error, answer.ms);
    this.era = answer.era;
    this.version = answer.version;
    this.toolsListChanged = answer.toolsListChanged;
  }

  /** Sends an op; resolves with the answer, rejects with a RequestError if it failed. */
  async op(op, fields = {}) {
    const answer = await this.client.request({ session: this.name, op, ...fields });
    if (!answer.ok) throw new RequestError(op === "call" ? `tools/call ${fields.name}` : op, answer.error, answer.ms);
    return answer;
  }

  listTools() {
    return this.op("list_tools");
  }

  call(name, args) {
    return this.op("call", { name, arguments: args });
  }

  async listen() {
    return (await this.op("listen")).subscription;
  }

  /** Ends the session (its bridge sees stdin close); a no-op for one that never connected. */
  async close() {
    if (!this.closed) {
      this.closed = true;
      await this.client.request({ session: this.name, op: "close" }, 10000);
    }
    this.client.listeners.delete(this.name);
  }

  /** Waits for an event `match` accepts among those from index `from` on. */
  async event(match, from, what) {
    const deadline = Date.now() + EVENT_WAIT_MS;
    for (;;) {
      if (this.events.slice(from).some(match)) return;
      const left = deadline - Date.now();
      expect(left > 0, `no ${what} within ${EVENT_WAIT_MS / 1000} s`);
      await Promise.race([new Promise((resolve) => this.waiters.push(resolve)), sleep(left)]);
    }
  }
}

/** A request the client SDK reported as failed, with the error it surfaced. */
class RequestError extends Failure {
  constructor(what, error, ms) {
    const data = error?.data ? ` data=${JSON.stringify(error.data)}` : "";
    super(`${what} failed after ${(ms / 1000).toFixed(1)} s: ${error?.code ?? ""} ${error?.message ?? "?"}${data}`);
    this.error = error;
    this.ms = ms;
  }
}

// The checks every scenario shares.

function checkEra(run, session) {
  const want = run.modern ? "modern" : "legacy";
  expect(session.era === want, `the session's era is ${session.era}, not ${want}`);
}

async function checkWorks(run, session, host) {
  const tools = (await session.listTools()).tools;
  expect(tools.includes("echo") && tools.includes("whoami"), `tools/list gave ${JSON.stringify(tools)}`);
  const echo = await session.call("echo", { text: "hello" });
  expect(!echo.isError && echo.text === "hello", `echo answered ${JSON.stringify(echo)}`);
  await checkWhoami(run, session, host);
}

/** whoami: the identity line reached the host, and `host` is the instance that answered. */
async function checkWhoami(run, session, host) {
  const who = await session.call("whoami", {});
  let said = {};
  try {
    said = JSON.parse(who.text);
  } catch {}
  expect(
    said.project === run.project && said.requester === run.requester,
    `whoami answered ${who.text}, not project ${run.project} requester ${run.requester}`,
  );
  expect(host === undefined || said.pid === host.pid, `whoami came from pid ${said.pid}, not the host ${host?.pid}`);
}

/** An error the bridge wrote: code -32000, data naming the bridge, `reasons`, this endpoint. */
function checkBridgeError(run, e, reasons, what) {
  if (!(e instanceof RequestError)) throw e;
  const { code, data } = e.error ?? {};
  expect(data && typeof data === "object", `${what}: the error has no data (${e.message})`);
  expect(data.source === "mcp-bridge", `${what}: error.data.source is ${JSON.stringify(data.source)} (${e.message})`);
  const reason = JSON.stringify(data.reason);
  expect(reasons.includes(data.reason), `${what}: error.data.reason is ${reason}, not ${reasons.join(" or ")}`);
  expect(REASONS.has(data.reason), `${what}: undocumented reason ${data.reason}`);
  expect(data.endpoint === run.sock, `${what}: error.data.endpoint is ${JSON.stringify(data.endpoint)}`);
  expect(code === -32000, `${what}: error code ${code}, not -32000`);
}

/** A request that must fail with one of the bridge's errors. */
async function expectBridgeError(run, promise, reasons, what) {
  try {
    const answer = await promise;
    const said = JSON.stringify(answer);
    throw new Failure(`${what} succeeded (${said}), expected the bridge's ${reasons.join("/")} error`);
  } catch (e) {
    checkBridgeError(run, e, reasons, what);
    return e.ms;
  }
}

/** The list_changed a resume owes the client: untagged in a legacy
 * session; in a modern one, tagged with the listen's id (and no untagged
 * one), with that listen still open. */
async function expectListChanged(run, session, subscription, from) {
  const isChange = (e) => e.event === "list_changed" && e.list === "tools";
  if (!run.modern) {
    await session.event((e) => isChange(e) && e.tag === null, from, "notifications/tools/list_changed");
    return;
  }
  const closed = (e) => e.event === "listen_closed" && e.subscription === subscription;
  await session.event(
    (e) => (isChange(e) && e.tag === subscription) || closed(e),
    from,
    `notifications/tools/list_changed tagged ${subscription}`,
  );
  const end = session.events.find(closed);
  expect(!end, `the listen ${subscription} ended (${JSON.stringify(end)}) instead of staying open`);
  const stray = session.events.slice(from).filter((e) => isChange(e) && e.tag !== subscription);
  expect(stray.length === 0, `a modern session got a list_changed tagged ${JSON.stringify(stray[0]?.tag)}`);
}

// a. plain: list tools, call echo and whoami (identity reaches the host).
async function plain(run) {
  const host = await run.newHost();
  await host.listen();
  run.step = "connect";
  const session = await run.connect();
  checkEra(run, session);
  expect(session.toolsListChanged === true, "the host's tools capability lost listChanged: true");
  run.step = "calls";
  await checkWorks(run, session, host);
}

// b. restart: SIGKILL mid-session, back 0.3 s later; then SIGTERM, back 0.3 s
// later. Every call after the host is back succeeds, answered by the new
// instance, and the resume tells the client the tools list may have changed
// (legacy: untagged; modern: tagged, on the listen opened before).
async function restart(run) {
  let host = await run.newHost();
  await host.listen();
  run.step = "connect";
  const session = await run.connect();
  checkEra(run, session);
  let subscription = null;
  if (run.modern) {
    run.step = "subscriptions/listen";
    subscription = await session.listen();
  }
  run.step = "calls";
  await checkWorks(run, session, host);
  for (const signal of ["SIGKILL", "SIGTERM"]) {
    const next = await run.newHost();
    const from = session.events.length;
    run.step = `${signal} the host`;
    await host.kill(signal);
    await sleep(300);
    await next.listen();
    host = next;
    run.step = `whoami after the ${signal} restart`;
    await checkWhoami(run, session, host);
    run.step = `list_changed after the ${signal} restart`;
    await expectListChanged(run, session, subscription, from);
    run.step = `calls after the ${signal} restart`;
    await checkWorks(run, session, host);
  }
}

// c. late app: the host listens 2 s after the client starts (within the
// default 5 s connect timeout); the session works, and a 2.x client stays
// modern against a 2.x host (its probe was held, not answered "legacy").
async function lateApp(run) {
  const host = await run.newHost();
  run.step = "connect (host not listening)";
  const connecting = run.connect();
  connecting.catch(() => {});
  await sleep(2000);
  await host.listen();
  const session = await connecting;
  checkEra(run, session);
  run.step = "calls";
  await checkWorks(run, session, host);
}

// d. late app beyond the connect timeout, with the app's answers cached: a
// plain session fills the cache dir; the host stops; a new session (same
// cache dir) connects while no host listens (answered from the cache) and
// the host comes 8 s later. Requests before that get the bridge's
// app_not_running error; once the host is up the session works without a
// new client: list_changed arrives (modern: tagged, on a listen opened while
// the app was away) and calls succeed.
//
// One cell differs by the SDK's design: TypeScript 2.x against a 1.x host
// spends a connect timeout on its probe's sibling bridge (no discover result
// is cached from a legacy app, so the probe is held, then refused) before
// it starts the session's bridge, whose own connect timeout has not passed
// when the host comes: its requests may be held and answered by the host
// instead (what the bridge must do within a connect timeout).
async function lateAppCached(run) {
  const first = await run.newHost();
  await first.listen();
  run.step = "the session that fills the cache";
  const filling = await run.connect();
  checkEra(run, filling);
  await checkWorks(run, filling, first);
  await filling.close();
  await first.kill("SIGTERM");

  const host = await run.newHost();
  let upAt = Infinity;
  const up = sleep(8000).then(async () => {
    await host.listen();
    upAt = Date.now();
  });
  up.catch(() => {});
  run.step = "connect while the app is away (from the cache)";
  const session = await run.connect();
  const took = (session.connectMs / 1000).toFixed(1);
  expect(Date.now() < upAt, `the connect was not answered from the cache: it took ${took} s, until the app came`);
  checkEra(run, session);
  let listening = null;
  if (run.modern) {
    // Held while the app is away; acknowledged once it is there.
    listening = session.listen();
    listening.catch(() => {});
  }
  run.step = "requests while the app is away";
  const mayBeHeld = run.client === "ts2" && !DUAL_ERA.has(run.host);
  const away = async (promise, what) => {
    try {
      await promise;
    } catch (e) {
      // (Also right just after the app came: the bridge looks about once a second.)
      checkBridgeError(run, e, ["app_not_running"], what);
      return;
    }
    expect(mayBeHeld, `${what} succeeded, expected the bridge's app_not_running error`);
    expect(Date.now() >= upAt, `${what} succeeded before the app was up`);
  };
  await away(session.call("echo", { text: "early" }), "tools/call while the app is away");
  // The app's last tool list is answered from the answers cache (issue 36),
  // so a CLI that never re-lists still has the app's tools.
  const cachedTools = (await session.listTools()).tools;
  expect(cachedTools.includes("echo"), `tools/list while the app is away: ${JSON.stringify(cachedTools)}, expected the app's last list from the cache`);
  run.step = "the app comes";
  await up;
  const subscription = listening && (await listening);
  run.step = "list_changed once the app is there";
  await expectListChanged(run, session, subscription, 0);
  run.step = "calls once the app is there";
  await checkWorks(run, session, host);
}

// e. late app beyond the connect timeout, without a cache: the connect fails
// with the bridge's app_not_running error within the connect timeout plus
// 1 s. (TypeScript 2.x probes on a sibling bridge process, takes its error
// for "legacy" and connects a second bridge: each owes its answer within
// that bound, so the client's connect fails within twice it, by the SDK's
// design.)
async function lateAppUncached(run) {
  const CONNECT_TIMEOUT = 2;
  const bridges = run.client === "ts2" ? 2 : 1;
  const bound = bridges * (CONNECT_TIMEOUT + 1) * 1000;
  run.step = "connect with no app and an empty cache";
  let session = null;
  try {
    session = await run.connect({ connectTimeout: CONNECT_TIMEOUT });
  } catch (e) {
    checkBridgeError(run, e, ["app_not_running"], "the connect");
    expect(e.ms <= bound, `the connect failed after ${(e.ms / 1000).toFixed(1)} s, not within ${bound / 1000} s`);
    return;
  }
  throw new Failure(`the connect succeeded with no app and no cache (era ${session.era})`);
}

// f. the bridge's errors are the bridge's: with the app gone for good
// (--reconnect-timeout 1), requests get errors whose data says they came
// from mcp-bridge, why, and for which endpoint: by the deadline (held
// within 0.5 s), and at once after it.
async function bridgeErrors(run) {
  const RECONNECT_TIMEOUT = 1;
  // The deadline's tolerance (0.5 s) and a second for a busy machine.
  const byDeadline = (RECONNECT_TIMEOUT + 0.5 + 1) * 1000;
  const host = await run.newHost();
  await host.listen();
  run.step = "connect";
  const session = await run.connect({ reconnectTimeout: RECONNECT_TIMEOUT });
  checkEra(run, session);
  await checkWorks(run, session, host);
  run.step = "SIGKILL the host, no restart";
  await host.kill("SIGKILL");
  const killed = Date.now();
  const GONE = ["app_not_running", "app_restarting"];
  run.step = "requests with the app gone";
  await expectBridgeError(run, session.call("echo", { text: "gone" }), GONE, "tools/call with the app gone");
  // The app's last list, from the answers cache (issue 36): a call still
  // gets the reason, at once.
  const cachedTools = (await session.listTools()).tools;
  expect(cachedTools.includes("echo"), `tools/list with the app gone: ${JSON.stringify(cachedTools)}, expected the app's last list from the cache`);
  const took = ((Date.now() - killed) / 1000).toFixed(1);
  expect(Date.now() - killed <= byDeadline, `the errors took ${took} s (reconnect timeout ${RECONNECT_TIMEOUT} s)`);
  run.step = "a request after the deadline";
  await sleep(Math.max(0, killed + byDeadline - Date.now()));
  const later = session.call("echo", { text: "later" });
  const ms = await expectBridgeError(run, later, ["app_not_running"], "tools/call after the deadline");
  expect(ms <= 1000, `the error after the deadline took ${(ms / 1000).toFixed(1)} s, not at once`);
}

const SCENARIOS = [
  { name: "a-plain", run: plain },
  { name: "b-restart", run: restart },
  { name: "c-late-app", run: lateApp },
  { name: "d-late-app-cached", run: lateAppCached },
  { name: "e-late-app-uncached", run: lateAppUncached, hostless: true },
  { name: "f-bridge-errors", run: bridgeErrors },
];

// ------------------------------------------------------------------- main

/** Runs one scenario once under the hang guard; resolves with null or the failure's text. */
async function runOnce(scenario, client, host, round) {
  const run = new Run(scenario, client, host, round);
  let timer;
  const guard = new Promise((_, reject) => {
    const stop = () => reject(new Failure(`hang guard: still running after ${HANG_GUARD_MS / 1000} s`));
    timer = setTimeout(stop, HANG_GUARD_MS);
  });
  let failure = null;
  try {
    await Promise.race([scenario.run(run), guard]);
  } catch (e) {
    failure = `${run.step}: ${e instanceof Failure ? e.message : e.stack}`;
  } finally {
    clearTimeout(timer);
  }
  const cleanup = run.cleanup();
  const stuck = await Promise.race([cleanup.then(() => false), sleep(15000).then(() => true)]);
  if (stuck) {
    // A client that cannot close its sessions is restarted for the next runs.
    clientProcess(client).kill();
    failure ??= "cleanup: the client did not close its session";
  }
  if (failure) {
    const tail = run.bridgeStderr().map((line) => `\n      ${line}`).join("");
    console.error(`FAIL ${scenario.name} ${client} -> ${host} #${round}: ${failure}${tail}`);
  }
  return failure;
}

const cells = [];
for (const scenario of SCENARIOS) {
  for (const client of SDKS) {
    for (const host of scenario.hostless ? ["-"] : SDKS) {
      if (!`${scenario.name} ${client} ${host}`.includes(filter)) continue;
      cells.push({ scenario, client, host, passed: 0, failed: 0, ms: 0 });
    }
  }
}
// Each round deals the cells out scenario by scenario, the long ones (d, b)
// first, so that the runs going at once are of different kinds and the
// last ones to finish are short.
const dealOrder = ["d-", "b-", "f-", "c-", "a-", "e-"];
const byScenario = dealOrder.map((prefix) => cells.filter((cell) => cell.scenario.name.startsWith(prefix)));
const dealt = [];
for (let i = 0; byScenario.some((list) => i < list.length); i++) {
  for (const list of byScenario) if (i < list.length) dealt.push(list[i]);
}
const jobs = [];
for (let round = 1; round <= RUNS; round++) {
  for (const cell of dealt) jobs.push({ cell, round });
}

const started = Date.now();
if (!CACHE_FLAG) {
  console.log("note: this mcp-bridge has no --cache-dir: the cache directory is given as MCP_BRIDGE_CACHE_DIR only");
}
console.log(`${cells.length} cells x ${RUNS} runs, ${PARALLEL} at a time`);

const stopAll = () => {
  for (const c of clients.values()) c.kill();
  for (const z of zygotes.values()) z.child.kill("SIGKILL");
};
process.on("SIGINT", () => (stopAll(), process.exit(130)));
process.on("SIGTERM", () => (stopAll(), process.exit(143)));

let next = 0;
async function worker() {
  while (next < jobs.length) {
    const { cell, round } = jobs[next++];
    const began = Date.now();
    const failure = await runOnce(cell.scenario, cell.client, cell.host, round);
    cell.ms += Date.now() - began;
    if (failure) cell.failed++;
    else cell.passed++;
  }
}
await Promise.all(Array.from({ length: PARALLEL }, worker));

for (const c of clients.values()) c.child.stdin.end();
for (const z of zygotes.values()) z.close();
await sleep(200);
stopAll();
if (!process.env.SDK_KEEP) fs.rmSync(workDir, { recursive: true, force: true });

let passed = 0;
let failed = 0;
for (const cell of cells) {
  passed += cell.passed;
  failed += cell.failed;
  const label = `${cell.scenario.name} ${cell.client} -> ${cell.host}`;
  const each = (cell.ms / 1000 / (cell.passed + cell.failed || 1)).toFixed(1);
  console.log(`${label.padEnd(36)} ${cell.passed} passed, ${cell.failed} failed (${each} s each)`);
}
console.log(`time: ${((Date.now() - started) / 1000).toFixed(0)} s`);
console.log(`total: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
