#!/usr/bin/env python3
"""Where the bytes of an mcp-bridge binary go, per crate and per module.

Usage: .ci/size-report.py BINARY [TOP]

BINARY must be built with its symbols (CARGO_PROFILE_RELEASE_STRIP=false;
.ci/features.sh --sizes does it). Reads `nm --size-sort -S --demangle`,
which lists the size of every function and static the linker kept, and
charges each to the crate (and, for mcp_bridge, the module) its demangled
name starts with (the library and the binary are both `mcp_bridge`: the
binary's modules are `main`, `cli`, `print`, `report` and `hint`); a generic instantiated for another crate's type is
charged to the crate whose code it is (`<T as Trait>::f` to T's crate).
Sections nm cannot see (headers, relocations, .dynsym, alignment) are the
difference to the file's size. Tools: binutils' nm and python3 only.
"""
import re
import subprocess
import sys
from collections import Counter


PRIMITIVES = {
    "str", "char", "bool", "u8", "u16", "u32", "u64", "u128", "usize",
    "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64",
}


def owner(name):
    # `<core::pin::Pin<P> as Future>::poll` -> the type's path; `{closure}`s
    # and generics are dropped; "std::..." -> ("std", "...").
    n = name
    while n.startswith("<") or n.startswith("&"):
        n = n.lstrip("<&").removeprefix("mut ").removeprefix("dyn ")
    n = n.lstrip("[(*")
    n = re.sub(r"^(const|mut) ", "", n)
    parts = re.split(r"::|<| as |>", n)
    crate = parts[0] if parts and parts[0] else "?"
    if crate in PRIMITIVES or re.match(r"^[A-Z][A-Za-z0-9]?$", crate):
        # `<F as Future>::poll`, `<str as Display>::fmt`: a generic or a
        # primitive's impl, whose code is std's or the caller's.
        crate = "(impls on generics, primitives)"
    elif crate == "rust_eh_personality" or crate.startswith("__rust"):
        crate = "std"
    elif not re.match(r"^[a-z_][a-z0-9_]*$", crate) or crate in ("main", "_start"):
        crate = "(C runtime, linker)"
    module = crate
    if crate == "mcp_bridge" and len(parts) > 1 and parts[1]:
        module = "mcp_bridge::" + parts[1]
    return crate, module


def main():
    binary = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    out = subprocess.run(
        ["nm", "--size-sort", "-S", "--demangle", binary],
        check=True, capture_output=True, text=True,
    ).stdout
    crates, modules = Counter(), Counter()
    for line in out.splitlines():
        fields = line.split(None, 3)
        if len(fields) < 4:
            continue
        size, name = int(fields[1], 16), fields[3]
        crate, module = owner(name)
        crates[crate] += size
        if crate == "mcp_bridge":
            modules[module] += size
    total = sum(crates.values())
    print(f"{'crate':<34} {'bytes':>9}")
    for crate, size in crates.most_common(top):
        print(f"{crate:<34} {size:>9}")
    print(f"{'(all symbols)':<34} {total:>9}")
    print()
    print(f"{'mcp_bridge module':<34} {'bytes':>9}")
    for module, size in modules.most_common():
        print(f"{module:<34} {size:>9}")


main()
