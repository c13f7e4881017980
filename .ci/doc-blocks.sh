#!/usr/bin/env bash
# The docs' code blocks as a reader uses them (issue 30): copied into a new
# crate, they compile; run where the docs say to run them, they work.
#
#   .ci/doc-blocks.sh [FILE.md...]      default: README.md docs/*.md
#
# The rules, for whoever writes a page:
#
# - A ```toml block whose first line is `[dependencies]` is what the reader
#   puts in a new crate's Cargo.toml. The ```rust blocks after it on the
#   same page, up to the next such block, are compiled together in a new
#   crate with exactly those dependencies (and none at all before the first
#   such block: that is an error). Its mcp-bridge line must be the crates.io
#   form with Cargo.toml's major and minor version (`version = "0.2"`);
#   here it points at this checkout.
# - Every ```rust block is compiled as written, `no_run`, `ignore` or
#   neither, with warnings denied: one with a `fn main` is a program; one
#   without is the body of `main`, as rustdoc takes it. No line may start
#   with `# `, which rustdoc hides but GitHub shows, so the reader's copy
#   would not compile. `ignore` is only for a block that needs a crate this
#   crate's doctests lack (tokio, rmcp): src/lib.rs runs every other block
#   as a doctest as well, also with Rust 1.63.
# - A ```sh ci-runs block installs release files: it runs in a directory of
#   fake release files (every name release.yml publishes) with their
#   SHA256SUMS, where it must succeed, and again with the files changed,
#   where it must fail (it checks the checksum). Its `version=` must be
#   Cargo.toml's version.
#
# The new crates start from examples/tokio-app's Cargo.lock, so they build
# with the versions that crate is tested with, and share one target
# directory (target/doc-blocks). Called by .ci/run; runs on its own too.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib.sh
. .ci/lib.sh

root="$PWD"
version="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
dependency="version = \"${version%.*}\""
work="$root/target/doc-blocks/pages"
export CARGO_TARGET_DIR="$root/target/doc-blocks/target"
rm -rf "$work"
mkdir -p "$work"
if [ "$#" -eq 0 ]; then
    set -- README.md docs/*.md
fi

# Every fenced block of the pages: block N's text in $work/blocks/N, and one
# line "N<tab>page<tab>line<tab>info string" in $work/index.
mkdir "$work/blocks"
awk -v dir="$work/blocks" -v index_file="$work/index" '
    !open && /^ *```/ {
        indent = index($0, "`") - 1
        info = substr($0, indent + 4)
        n++
        open = 1
        out = dir "/" n
        printf "" > out
        printf "%d\t%s\t%d\t%s\n", n, FILENAME, FNR, info >> index_file
        next
    }
    open && /^ *```[ \t]*$/ { open = 0; close(out); next }
    open { print substr($0, indent + 1) >> out }
' "$@"

fail() { echo "doc-blocks: $*" >&2; exit 1; }

crates=()
runs=()
crate=""
page=""
while IFS=$'\t' read -r n file line info; do
    block="$work/blocks/$n"
    where="$file:$line"
    if [ "$file" != "$page" ]; then
        page="$file"
        crate=""
    fi
    lang="${info%%[ ,]*}"
    case "$lang" in
        toml)
            [ "$(head -n 1 "$block")" = "[dependencies]" ] || continue
            grep -qF "mcp-bridge = { $dependency" "$block" ||
                fail "$where: the mcp-bridge line must start: mcp-bridge = { $dependency"
            name="$(basename "$file" .md | tr -c 'a-zA-Z0-9\n' '-' | tr '[:upper:]' '[:lower:]')-$line"
            crate="$work/crates/$name"
            mkdir -p "$crate/src" "$crate/examples"
            {
                printf '[package]\nname = "doc-%s"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[workspace]\n\n' "$name"
                sed "s|$dependency|path = \"$root\"|" "$block"
            } >"$crate/Cargo.toml"
            # An empty program, so that a dependency block with no Rust
            # after it is still checked.
            echo 'fn main() {}' >"$crate/src/main.rs"
            cp examples/tokio-app/Cargo.lock "$crate/"
            crates+=("$crate")
            ;;
        rust)
            [ -n "$crate" ] || fail "$where: a Rust block with no \`\`\`toml [dependencies] block before it on the page"
            if grep -nE '^[[:space:]]*#( |$)' "$block"; then
                fail "$where: lines that rustdoc hides show on GitHub: write them out"
            fi
            program="$crate/examples/line_$line.rs"
            if grep -qE '^[[:space:]]*(async )?fn main\(' "$block"; then
                {
                    echo "// $where"
                    cat "$block"
                } >"$program"
            else
                {
                    echo "// $where"
                    echo "fn main() {"
                    cat "$block"
                    echo "}"
                } >"$program"
            fi
            ;;
        sh)
            case " $info " in
                *" ci-runs "*) ;;
                *) continue ;;
            esac
            grep -q "^version=$version\$" "$block" ||
                fail "$where: a ci-runs block sets version=$version"
            runs+=("$n	$where")
            ;;
    esac
done <"$work/index"

for crate in "${crates[@]}"; do
    step "the Rust blocks of $(basename "$crate"), in a new crate with their dependencies ($(find "$crate/examples" -name '*.rs' | wc -l) blocks)"
    sed -n '/^\[dependencies\]/,$p' "$crate/Cargo.toml"
    (cd "$crate" && RUSTFLAGS="-D warnings" cargo check --quiet --bins --examples)
done

# The names .github/workflows/release.yml publishes, as fake files.
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl aarch64-apple-darwin
    x86_64-apple-darwin x86_64-pc-windows-msvc aarch64-pc-windows-msvc)
release_files() {
    local dir=$1 target exe build
    mkdir -p "$dir"
    for target in "${TARGETS[@]}"; do
        case "$target" in *-windows-*) exe=.exe ;; *) exe= ;; esac
        for build in "" -bridge-only; do
            echo "a fake mcp-bridge for $target$build" >"$dir/mcp-bridge-$version-$target$build$exe"
        done
    done
    (cd "$dir" && sha256sum mcp-bridge-* >SHA256SUMS)
}

for run in "${runs[@]}"; do
    n="${run%%	*}"
    where="${run#*	}"
    step "the ci-runs block at $where, on fake release files, then on changed ones"
    good="$work/run-$n/good"
    release_files "$good"
    (cd "$good" && sh -eu "$work/blocks/$n") || fail "$where: failed on good release files"
    bad="$work/run-$n/bad"
    release_files "$bad"
    for file in "$bad"/mcp-bridge-*; do
        echo "changed" >>"$file"
    done
    if (cd "$bad" && sh -eu "$work/blocks/$n") >"$bad.log" 2>&1; then
        cat "$bad.log"
        fail "$where: passed on changed release files, so it does not check the checksum"
    fi
    echo "and on changed files it fails, as it should:"
    cat "$bad.log"
done
step "every code block of $* as the docs say"
