#!/usr/bin/env bash
# The Windows build of mcp-bridge, linted and tested under Wine, with Debian's
# own toolchain: rustc 1.63 (our MSRV) with its Windows standard library, the
# MinGW linker, clippy 1.63, and Wine 8. Everything comes from Debian's
# archive, so this runs on a fresh Debian 12 machine. Called by .ci/run; it
# also runs on its own: `bash .ci/windows.sh`.
#
# What a green run proves and what it cannot (Wine does not serialize I/O on
# synchronous handles the way Windows does): see docs/windows.md ("How it is verified")
# and src/endpoint/windows.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib.sh
. .ci/lib.sh

TARGET=x86_64-pc-windows-gnu

need_debian_packages rustc cargo rust-clippy libstd-rust-dev-windows gcc-mingw-w64-x86-64 wine wine64

# A private, throw-away Wine prefix (about 700 MB), quiet, without the Mono
# and Gecko installers it would otherwise offer.
WINEPREFIX="$(mktemp -d "${TMPDIR:-/tmp}/mcp-bridge-wine.XXXXXX")"
export WINEPREFIX WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
cleanup() {
    wineserver -k >/dev/null 2>&1 || true
    rm -rf "$WINEPREFIX"
}
trap cleanup EXIT
# Under Wine 8, printing a Rust backtrace crashes the process, which would
# turn one failing assertion into a crash of the whole test binary with the
# message lost. Plain panic messages work.
export RUST_BACKTRACE=0

# Lints for the Windows target, with Debian's clippy, which matches its rustc
# 1.63. It is called by its path: `cargo clippy` would find rustup's
# cargo-clippy in ~/.cargo/bin first, whose clippy-driver cannot read 1.63's
# metadata.
step "clippy, Windows target (Debian's clippy 1.63): cargo clippy --locked --target $TARGET --all-targets -- -D warnings"
debian /usr/bin/cargo-clippy clippy --locked --target "$TARGET" --all-targets -- -D warnings

step "creating the Wine prefix"
started=$SECONDS
# Creating the prefix on first use, in the middle of a test run, makes that
# first test binary fail; create it up front and wait until it is ready.
wineboot --init >/dev/null 2>&1 || true
wineserver -w
# One wineserver for the whole run: left to itself it exits a few seconds
# after each test binary, and a binary starting in that moment fails with
# "wine client error: recvmsg: Connection reset by peer" (seen once in CI).
# The cleanup above stops it. Wine's helper processes live as long as it
# does and inherit the output of the test run, so that output goes to a
# file, not a pipe, which they would hold open for ever.
wineserver -p </dev/null >/dev/null 2>&1
echo "Wine prefix ready in $((SECONDS - started)) s"

step "tests, Windows target under Wine: cargo test --locked --target $TARGET"
log="$WINEPREFIX/cargo-test.log"
started=$SECONDS
status=0
debian /usr/bin/cargo test --locked --target "$TARGET" >"$log" 2>&1 || status=$?
cat "$log"
echo
echo "Windows test summary ($((SECONDS - started)) s, build included):"
grep -E '^ *Running |^test result:' "$log" || true
if [ "$status" -ne 0 ]; then
    echo "Windows tests FAILED (exit status $status)" >&2
    exit "$status"
fi
