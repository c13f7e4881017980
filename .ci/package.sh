#!/usr/bin/env bash
# The crate as a dependency sees it (issue 30): `cargo publish --dry-run`
# (issue 37: crates.io would take it) warns about nothing and its
# verification build passes, the package holds only what Cargo.toml's
# `include` names (the license texts with it); and `--version` names this
# crate's own commit or none, never a wrong one: a packaged copy names the
# commit it was packaged from (.cargo_vcs_info.json), and a copy vendored
# into another git repository says `unknown` rather than that
# repository's commit.
# Called by .ci/run; runs on its own too.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib.sh
. .ci/lib.sh

version="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
head="$(git rev-parse --short=12 HEAD)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# Target directories apart from the main one, and one per copy of the
# crate: cargo gives every copy of mcp-bridge 0.2.0 the same fingerprints
# wherever its source is, so copies sharing one would reuse each other's
# build-script output (and so each other's `--version`).
# They start empty, so no output of an earlier run (another commit's) is
# taken for this one's.
target="$PWD/target/ci-package"
rm -rf "$target"
export CARGO_TARGET_DIR="$target/package"

# --allow-dirty only in a working copy with changes (run by hand): a clean
# clone, as .ci/run's, is published as it is. The commit recorded is HEAD's
# either way.
dirty=()
if [ -n "$(git status --porcelain)" ]; then
    dirty=(--allow-dirty)
fi

step "cargo package: no warning, and it builds"
cargo package --locked ${dirty[@]+"${dirty[@]}"} 2>&1 | tee "$scratch/package.log"
if grep -q '^warning' "$scratch/package.log"; then
    echo "cargo package warned (above)" >&2
    exit 1
fi

step "cargo publish --dry-run: crates.io would take it (name, metadata, license, dependencies)"
# The package was built just above: no second verification build.
cargo publish --dry-run --no-verify --locked ${dirty[@]+"${dirty[@]}"} 2>&1 | tee "$scratch/publish.log"
if grep '^warning' "$scratch/publish.log" | grep -qv '^warning: aborting upload due to dry run$'; then
    echo "cargo publish --dry-run warned (above)" >&2
    exit 1
fi

step "the package holds nothing but what Cargo.toml includes"
cargo package --locked ${dirty[@]+"${dirty[@]}"} --list >"$scratch/list"
unexpected="$(grep -vE '^(src/|tests/.*\.rs$|benches/.*\.rs$|docs/[^/]*\.md$|examples/app_server\.rs$|build\.rs$|Cargo\.(toml|toml\.orig|lock)$|README\.md$|BENCHMARKS\.md$|LICENSE-(MIT|APACHE)$|\.cargo_vcs_info\.json$)' "$scratch/list" || true)"
if [ -n "$unexpected" ]; then
    echo "the package holds files it should not:" >&2
    echo "$unexpected" >&2
    exit 1
fi
echo "$(wc -l <"$scratch/list") files, as Cargo.toml's include says"

# Checks that the bridge-only build of the crate whose manifest is $1 says
# `--version` with the commit $2; builds into target directory $3.
version_says() {
    local manifest=$1 commit=$2 line
    CARGO_TARGET_DIR="$target/$3" cargo build --quiet --locked --no-default-features --manifest-path "$manifest"
    line="$("$target/$3/debug/mcp-bridge" --version)"
    echo "$line"
    case "$line" in
        "mcp-bridge $version ($commit, "*", bridge-only)") ;;
        *) echo "expected the commit '$commit' in: $line" >&2; exit 1 ;;
    esac
}

step "--version of the packaged crate names the commit it was packaged from ($head)"
tar -xzf "$CARGO_TARGET_DIR/package/mcp-bridge-$version.crate" -C "$scratch"
version_says "$scratch/mcp-bridge-$version/Cargo.toml" "$head" packaged

step "--version of a copy vendored into an app's repository names no commit, not the app's"
app="$scratch/app"
mkdir -p "$app/vendor/mcp-bridge"
git archive HEAD | tar -x -C "$app/vendor/mcp-bridge"
git -C "$app" init --quiet
git -C "$app" add .
git -C "$app" -c user.name=ci -c user.email=ci@localhost commit --quiet -m "the app"
echo "the app's commit: $(git -C "$app" rev-parse --short=12 HEAD)"
version_says "$app/vendor/mcp-bridge/Cargo.toml" unknown vendored
