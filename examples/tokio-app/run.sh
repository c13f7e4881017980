#!/bin/sh
# The tokio example app (src/main.rs) with a real MCP client (rmcp's, in
# src/bin/session.rs) through the built bridge, across SIGKILL, SIGTERM and
# Ctrl-C restarts of the app: builds the bridge (release, as shipped) and
# the example, says how many lines the glue between mcp_bridge::host and
# rmcp is, runs N rounds (default 10) and prints "N passed, M failed".
# Needs cargo and crates.io only. Exit status 0 only if every round passed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${1:-10}
(cd "$root" && cargo build --release --locked --quiet)
(cd "$here" && cargo build --locked --quiet)
bridge=${CARGO_TARGET_DIR:-$root/target}/release/mcp-bridge
bin=${CARGO_TARGET_DIR:-$here/target}/debug
glue=$(sed -n '/glue: begin/,/glue: end/p' "$here/src/main.rs" | grep -cvE '^[[:space:]]*(//|$)')
echo "the glue between mcp_bridge::host and rmcp: $glue lines (serve_bridge in src/main.rs)"
"$bin/session" "$bridge" "$rounds"
