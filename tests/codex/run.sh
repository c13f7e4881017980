#!/bin/sh
# The answers cache with the real Codex CLI (issue 36): see cache.py. Installs
# @openai/codex (pinned) under tests/codex/node_modules on first use, builds
# the release binary, and runs the scenario once. Needs node, npm, python3.
# Not part of `cargo test`. Usage: sh tests/codex/run.sh [BRIDGE]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CODEX_VERSION=0.169.0
if [ "$("$here/node_modules/.bin/codex" --version 2>/dev/null)" != "codex-cli $CODEX_VERSION" ]; then
    (cd "$here" && npm install --no-audit --no-fund --silent --no-save "@openai/codex@$CODEX_VERSION")
fi
if [ $# -ge 1 ]; then
    bin=$1
else
    (cd "$root" && cargo build --release --locked --quiet)
    bin=${CARGO_TARGET_DIR:-$root/target}/release/mcp-bridge
fi
exec python3 "$here/cache.py" "$here/node_modules/.bin/codex" "$bin"
