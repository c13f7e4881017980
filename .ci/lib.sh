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
