#!/usr/bin/env python3
"""Issue 36 with the real Codex CLI: Codex (its `app-server`) started before
the app lists the app's tools (`mcpServerStatus/list`) from the bridge's
answers cache, which an earlier session filled; once the app is up, a tool
call (`mcpServer/tool/call`) reaches it. Codex keeps its tool catalog for
30 minutes and only logs `list_changed`, so without the cache it would
have no tools for the session.

Usage: python3 tests/codex/cache.py CODEX BRIDGE (run.sh installs Codex).
Exit 0 when both hold. Against the build before issue 36, the status has
no tools ("MCP startup failed: ... app_not_running").
"""
import json, os, socket, subprocess, sys, tempfile, threading, time

codex, bridge = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp(prefix="wt36-codex-")
sock = os.path.join(work, "app.sock")
cache = os.path.join(work, "cache")

def app(name, stop):
    """A tiny MCP app on the socket: handshake line, then line-delimited JSON-RPC."""
    srv = socket.socket(socket.AF_UNIX)
    if os.path.exists(sock):
        os.unlink(sock)
    srv.bind(sock); srv.listen(8); srv.settimeout(0.2)
    def serve(c):
        f = c.makefile("rwb")
        f.readline()  # handshake
        for line in f:
            m = json.loads(line)
            if "id" not in m or "method" not in m:
                continue
            meth = m["method"]
            if meth == "initialize":
                r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": name, "version": "1"}}
            elif meth == "tools/list":
                r = {"tools": [{"name": "echo", "description": "echo from " + name, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}
            elif meth == "tools/call":
                r = {"content": [{"type": "text", "text": "%s says %s" % (name, m["params"]["arguments"].get("text"))}]}
            elif meth in ("prompts/list",):
                r = {"prompts": []}
            elif meth in ("resources/list",):
                r = {"resources": []}
            elif meth in ("resources/templates/list",):
                r = {"resourceTemplates": []}
            else:
                r = {}
            f.write((json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n").encode()); f.flush()
    while not stop.is_set():
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(c,), daemon=True).start()
    srv.close()  # socket file stays: "not running"

def start_app(name):
    stop = threading.Event()
    t = threading.Thread(target=app, args=(name, stop), daemon=True); t.start()
    while not os.path.exists(sock): time.sleep(0.01)
    return stop

bridge_args = ["mcp-server", "--endpoint", sock, "--project", "p", "--requester", "codex", "--cache-dir", cache, "--connect-timeout", "1"]

# 1. An earlier session with the app up fills the cache (initialize, tools/list).
stop = start_app("earlier")
p = subprocess.Popen([bridge] + bridge_args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
for i, (meth, params) in enumerate([("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fill", "version": "1"}}), ("tools/list", {})]):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": meth, "params": params}) + "\n").encode()); p.stdin.flush()
    print("fill:", p.stdout.readline().decode().strip()[:120])
p.stdin.close(); p.wait()
stop.set(); time.sleep(0.5)

# 2. Codex starts while the app is away.
home = os.path.join(work, "codex-home"); os.makedirs(home)
with open(os.path.join(home, "config.toml"), "w") as f:
    f.write("[mcp_servers.app]\ncommand = %s\nargs = %s\nstartup_timeout_sec = 20\n" % (json.dumps(bridge), json.dumps(bridge_args)))
env = dict(os.environ, CODEX_HOME=home)
cx = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(work, "codex.err"), "w"), env=env)
nid = [0]
def call(method, params):
    nid[0] += 1
    cx.stdin.write((json.dumps({"jsonrpc": "2.0", "id": nid[0], "method": method, "params": params}) + "\n").encode()); cx.stdin.flush()
    while True:
        line = cx.stdout.readline()
        if not line:
            raise SystemExit("codex app-server ended; see " + work + "/codex.err")
        m = json.loads(line)
        if m.get("id") == nid[0] and "method" not in m:
            return m
        if "method" in m and "id" in m:  # a request of codex's: decline
            cx.stdin.write((json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {}}) + "\n").encode()); cx.stdin.flush()

print("initialize:", json.dumps(call("initialize", {"clientInfo": {"name": "wt36", "version": "1"}}))[:200])
cx.stdin.write(b'{"jsonrpc":"2.0","method":"initialized"}\n'); cx.stdin.flush()
status = call("mcpServerStatus/list", {})
print("status (app away):", json.dumps(status)[:600])
tools = [t for s in status.get("result", {}).get("data", []) for t in (s.get("tools") or {})]
print("tools while the app is away:", tools)

# 3. The app comes; a tool call reaches it.
stop = start_app("later")
time.sleep(2.5)  # the bridge looks about once a second
thread = call("thread/start", {"cwd": work, "ephemeral": True})
tid = thread.get("result", {}).get("thread", {}).get("id")
print("thread:", json.dumps(thread)[:200])
res = call("mcpServer/tool/call", {"server": "app", "threadId": tid, "tool": "echo", "arguments": {"text": "hi"}})
print("tool call:", json.dumps(res)[:400])
called = res.get("result", {}).get("content", [{}])[0].get("text") == "later says hi"
cx.stdin.close()
try:
    cx.wait(timeout=10)
except subprocess.TimeoutExpired:
    cx.kill()
stop.set()
print("work dir:", work)
if tools != ["echo"] or not called:
    raise SystemExit("FAILED: tools while the app was away %s, call reached the app: %s" % (tools, called))
print("passed")
