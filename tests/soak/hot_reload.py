#!/usr/bin/env python3
"""Soak: a hot reload every 4 s for N minutes (issue 28), run by hand.

Usage: tests/soak/hot_reload.py BRIDGE MINUTES

Each app instance serves about 3.7 s on a Unix socket, then closes its
listener and connections; the next binds 0.3 s later. A legacy client
asks `tools/list` every 0.5 s through the bridge; every call must get a
result. Prints the counts; exits 1 if any call got an error. Not run by
`cargo test` or `.ci/run` (it takes minutes): tests/sessions.rs holds
the same rule in 20 restarts.
"""
import json, os, socket, subprocess, sys, tempfile, threading, time
bridge = sys.argv[1]; minutes = float(sys.argv[2])
path = os.path.join(tempfile.mkdtemp(prefix="mcpb-soak-"), "app.sock")
stop = time.time() + minutes * 60
restarts = 0
def instance(n):
    try: os.unlink(path)
    except FileNotFoundError: pass
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(8); srv.settimeout(0.1)
    end = time.time() + 3.7
    conns = []
    while time.time() < end:
        try:
            c, _ = srv.accept(); conns.append(c)
            threading.Thread(target=serve, args=(c, n), daemon=True).start()
        except socket.timeout: pass
    srv.close(); os.unlink(path)
    for c in conns:
        try: c.shutdown(socket.SHUT_RDWR); c.close()
        except OSError: pass
def serve(c, n):
    f = c.makefile("rb")
    try:
        f.readline()
        for line in f:
            m = json.loads(line)
            if "id" in m and "method" in m:
                if m["method"] == "initialize":
                    r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "app-%d" % n, "version": "1"}}
                else:
                    r = {"content": [{"type": "text", "text": "app-%d" % n}]}
                c.sendall((json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n").encode())
    except OSError: pass
def apps():
    global restarts
    n = 0
    while time.time() < stop + 2:
        instance(n); n += 1; restarts = n
        time.sleep(0.3)
threading.Thread(target=apps, daemon=True).start()
time.sleep(0.5)
p = subprocess.Popen([bridge, "mcp-server", "--endpoint", path, "--project", "p", "--requester", "r"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, MCP_BRIDGE_CACHE_DIR=""))
def send(m): p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
def reply(i):
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == i: return m
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}})
print(reply(0)["result"]["serverInfo"])
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
i = 1; ok = 0; bad = []
while time.time() < stop:
    send({"jsonrpc": "2.0", "id": i, "method": "tools/list"})
    m = reply(i)
    if "result" in m: ok += 1
    else: bad.append(m)
    i += 1; time.sleep(0.5)
p.stdin.close(); p.wait()
print("calls %d ok %d errors %d restarts %d exit %s" % (i - 1, ok, len(bad), restarts, p.returncode))
for b in bad[:5]: print(b)
sys.exit(1 if bad else 0)
