#!/bin/sh
# Interop with the official MCP SDKs of both protocol eras, through the
# release binary: clients and hosts of TypeScript 1.x (@modelcontextprotocol/
# sdk, legacy), TypeScript 2.x (@modelcontextprotocol/client and /server,
# both eras), Python 1.x and Python 2.x (mcp, legacy / both eras). Every
# client against every host, in six scenarios (driver.mjs says each):
# a plain session, host restarts (SIGKILL, SIGTERM), an app 2 s late, an app
# later than the connect timeout with and without a cached answer, and the
# bridge's own errors. Each scenario runs N times (default 3), at most 60 s
# each; one line per cell with its pass and fail counts, then the total.
# Exit status 0 only if every run passed. At N=3 on 2 cores: about 2.5
# minutes when most scenarios fail fast, up to about 5 when every late app
# is waited out; the first run also installs (about a minute).
#
# Usage: sh tests/sdk/run.sh [N] [FILTER]   (FILTER: e.g. "b-restart ts2")
# Installs what is missing here: npm ci (package-lock.json), and one venv per
# Python SDK line from PyPI with pinned hashes (requirements-py*.txt); needs
# node >= 20, npm and python3.11. Not part of `cargo test`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${1:-3}
filter=${2:-}

# A stamp of what an install was made from, so that an unchanged one is not redone.
stamp() { sha256sum "$1" | cut -d' ' -f1; }

if [ "$(cat "$here/node_modules/.stamp" 2>/dev/null)" != "$(stamp "$here/package-lock.json")" ]; then
    (cd "$here" && npm ci --no-audit --no-fund --silent)
    stamp "$here/package-lock.json" >"$here/node_modules/.stamp"
fi
python=$(command -v python3.11 || command -v python3)
for line in py1 py2; do
    venv=$here/.venv-$line
    requirements=$here/requirements-$line.txt
    if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$(stamp "$requirements")" ]; then
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$requirements"
        stamp "$requirements" >"$venv/.stamp"
    fi
done

(cd "$root" && cargo build --release --locked --quiet)
bin=${CARGO_TARGET_DIR:-$root/target}/release/mcp-bridge
exec node "$here/driver.mjs" "$bin" "$runs" "$filter"
