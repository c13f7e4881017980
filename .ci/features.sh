#!/usr/bin/env bash
# The Cargo features (Cargo.toml): every combination a bundler would pick
# builds and passes clippy, the bridge's own tests pass in the bridge-only
# build (`--no-default-features`) against its own binary, and both release
# binaries stay within their size limits, stripped, and position-
# independent. Called by .ci/run; runs on its own too:
#
#   .ci/features.sh           everything
#   .ci/features.sh --sizes   only the two release builds, their sizes and
#                             where the bytes go (.ci/size-report.py)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib.sh
. .ci/lib.sh

# Stripped bytes (Linux x86_64, cargo's own `strip = true`).
# The targets (issue 25): bridge-only at most 430,000, the full build under
# 800,000. They are not met yet (BENCHMARKS.md, "After the session engine"),
# so CI fails only on a regression past today's ceilings, and prints how far
# each build is from its target. Lower the ceilings as the sizes come down;
# once a build meets its target, its ceiling is the target.
BRIDGE_ONLY_TARGET=430000
FULL_TARGET=800000
# The second session engine and the merges beside it (issues 28-31) took
# the builds to 512,656 and 919,000 bytes, past the ceilings of then
# (466,500 and 865,500); issue 32's levers (BENCHMARKS.md, "Lean again")
# brought them to 501,136 and 892,304; the session engine's last fixes
# (an unread request sent again, a batch of late replies) add about 2 KB:
# 503,240 and 893,656; the bridge-only build on async-io's block_on
# without smol (a shorter build, +440 bytes) and the stderr line that
# says when an instance took the session after an absence: 504,320 and
# 894,416; the cache's directory held open while its files are opened in
# it (openat, renameat): 505,296 and 895,752. Issue 38's levers, each
# lowering the ceilings as it lands: a C `main` of our own on Unix
# (src/ffi/entry.rs): 489,416 and 881,464; LLVM's machine outliner
# (.cargo/config.toml, which these builds read): 475,304 and 858,488;
# stdio by descriptor (no std Stdin/Stdout/Stderr handles on Unix): 471,080
# and 857,856; demo's JSON parsed from its own text instead of built with
# json!: full 852,176; helper threads on 64 KiB stacks, the hang-up
# watcher without a Vec per poll: 469,752 and 851,088. Then issues 35-37
# landed beside them (still below the ceilings this session began with,
# 506,000 and 896,000): the answers cache's rules (one file per answer,
# who served it, the lists; +~0.7 KB and +4.3 KB), the session engine's
# promises (ids as JSON values without float parsing, questions mapped
# under stale ids, batches followed past the hold limit, silence told from
# refusal; about +14 KB bridge-only), the caller per request (-0.5 KB with
# the one option parser), and BridgeError's Debug as its Display (-3.9 KB):
# 480,520 and 866,952. The ceilings are the last figures, rounded up to
# the next thousand.
BRIDGE_ONLY_LIMIT=480000
FULL_LIMIT=862000

# The combinations: the bridge alone, each feature alone on top of it
# (what a bundler adds one at a time), the bridge with its log, an app's
# toolkit without the binary's extras, and everything but the demo.
COMBINATIONS=(
    "--no-default-features"
    "--no-default-features --features log"
    "--no-default-features --features host"
    "--no-default-features --features serve"
    "--no-default-features --features doctor"
    "--no-default-features --features demo"
    "--no-default-features --features app-server"
    "--no-default-features --features host,app-server"
    "--no-default-features --features serve,doctor,host,app-server,log"
    ""
)

# The tests that are the bridge's own: each must pass against the
# bridge-only binary as against the full one.
BRIDGE_TESTS=(--lib --bins --test bridge --test bridge_faults --test survive --test sessions --test replies --test trust --test stdio_kinds --test app_name --test cache)

# Builds one release binary with `features` (word-split on purpose) and
# checks its size against the ceiling `limit`; prints the size and how far
# it is from its `target`.
check_size() {
    local name=$1 limit=$2 features=$3 target=$4 bin
    # shellcheck disable=SC2086
    cargo build --release --locked $features
    bin=target/release/mcp-bridge
    local size
    size=$(stat -c %s "$bin")
    readelf -h "$bin" | grep -q 'Type:.*DYN' || {
        echo "$name: not position-independent (ELF type is not DYN)" >&2
        exit 1
    }
    echo "$name: $size bytes stripped (ceiling $limit, target $target)"
    if [ "$size" -gt "$target" ]; then
        echo "$name: $((size - target)) bytes over the target of $target (not met yet)"
    fi
    if [ "$size" -gt "$limit" ]; then
        echo "$name: $size bytes is over the limit of $limit" >&2
        exit 1
    fi
}

# The same build with its symbols, into its own target directory, and the
# report of where its bytes go.
size_report() {
    local name=$1 features=$2
    step "where the bytes go: $name"
    # shellcheck disable=SC2086
    CARGO_TARGET_DIR=target/with-symbols CARGO_PROFILE_RELEASE_STRIP=false \
        cargo build --release --locked $features
    python3 .ci/size-report.py target/with-symbols/release/mcp-bridge 15
}

sizes() {
    step "release sizes (stripped, Linux $(uname -m))"
    check_size "bridge-only (--no-default-features)" "$BRIDGE_ONLY_LIMIT" "--no-default-features" "$BRIDGE_ONLY_TARGET"
    check_size "full (default features)" "$FULL_LIMIT" "" "$FULL_TARGET"
}

if [ "${1:-}" = "--sizes" ]; then
    sizes
    size_report "bridge-only" "--no-default-features"
    size_report "full" ""
    exit 0
fi

for features in "${COMBINATIONS[@]}"; do
    step "cargo clippy --all-targets --locked ${features:-(default features)} -- -D warnings"
    # shellcheck disable=SC2086
    cargo clippy --all-targets --locked $features -- -D warnings
done

step "cargo doc --no-deps --no-default-features  (the bridge-only API's links)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked --no-default-features

step "the bridge's tests against the bridge-only build (debug and release)"
cargo test --locked --no-default-features
cargo test --release --locked --no-default-features "${BRIDGE_TESTS[@]}"

sizes
