#!/usr/bin/env bash
# The bridge's core never awaits I/O, reads the clock or touches a file
# (src/bridge/mod.rs, "the rooms"): its files must not name the async I/O
# crates' readers and timers, the real clock or std's files. The shell
# (session.rs, online.rs, mod.rs) and the tests' own modules are not the
# core. Fails with the lines that break the rule.
set -euo pipefail
cd "$(dirname "$0")/.."

core=(
    src/bridge/engine.rs
    src/bridge/ledger
    src/bridge/client.rs
    src/bridge/app.rs
    src/bridge/outage.rs
    src/bridge/answer.rs
    src/bridge/answers.rs
)
if grep -rnE 'async_io|futures_lite::io|Instant::now|SystemTime|std::fs' "${core[@]}"; then
    echo "core-check: the bridge's core names I/O or the clock (above); move that to the shell" >&2
    exit 1
fi
echo "core-check: the bridge's core (${core[*]}) names no I/O and no clock"
