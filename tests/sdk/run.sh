#!/bin/sh
# Interop with the official TypeScript MCP SDK (client and host) across host
# restarts: npm ci here, build the bridge, run the scenario N times (default
# 10) and print "N passed, M failed". Needs node >= 18 and npm; not part of
# `cargo test`. Exit status 0 only if every run passed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${1:-10}
(cd "$here" && npm ci --no-audit --no-fund --silent)
(cd "$root" && cargo build --release --locked --quiet)
bin=${CARGO_TARGET_DIR:-$root/target}/release/mcp-bridge
passed=0
failed=0
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    if node "$here/client.mjs" "$bin"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "run $i failed" >&2
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
