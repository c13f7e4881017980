#!/bin/sh
# Real dual-era clients against a legacy server built on rmcp 2.x (which
# hangs up on their server/discover probe), through the built bridge:
# rmcp 3.x's client in ClientLifecycleMode::Auto and the Python SDK 2.x
# client in its default mode (src/bin/probe.rs says what is checked).
# Builds the bridge (release, as shipped) and this crate, installs the
# Python SDK 2.x into tests/sdk/.venv-py2 if missing (as tests/sdk/run.sh
# does, from requirements-py2.txt with pinned hashes), and prints
# "N passed, M failed". Needs cargo, crates.io, python3.11 and PyPI; Unix only.
# Exit status 0 only if both clients passed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
requirements=$root/tests/sdk/requirements-py2.txt
venv=$root/tests/sdk/.venv-py2
stamp() { sha256sum "$1" | cut -d' ' -f1; }
if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$(stamp "$requirements")" ]; then
    python=$(command -v python3.11 || command -v python3)
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$requirements"
    stamp "$requirements" >"$venv/.stamp"
fi
(cd "$root" && cargo build --release --locked --quiet)
(cd "$here" && cargo build --locked --quiet)
bridge=${CARGO_TARGET_DIR:-$root/target}/release/mcp-bridge
bin=${CARGO_TARGET_DIR:-$here/target}/debug
exec "$bin/probe" "$bridge" "$venv/bin/python" "$here/py2_probe.py"
