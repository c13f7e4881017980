#!/usr/bin/env python3
"""Where the bytes of an mcp-bridge binary go, per crate and per module.

Usage: .ci/size-report.py BINARY [TOP]

BINARY must be built with its symbols (CARGO_PROFILE_RELEASE_STRIP=false;
.ci/features.sh --sizes does it). Reads `nm --size-sort -S --demangle`,
which lists the size of every function and static the linker kept, and
charges each to the crate (and, for mcp_bridge, the module) its demangled
name starts with; a generic instantiated for another crate's type is
charged to the crate whose code it is (`<T as Trait>::f` to T's crate).
Sections nm cannot see (headers, relocations, .dynsym, alignment) are the
difference to the file's size. Tools: binutils' nm and python3 only.
"""
import re
import subprocess
import sys
from collections import Counter


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
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", crate) or "." in crate:
        crate = "(C and linker)"
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
    print(f"{'crate':<28} {'bytes':>9}")
    for crate, size in crates.most_common(top):
        print(f"{crate:<28} {size:>9}")
    print(f"{'(all symbols)':<28} {total:>9}")
    print()
    print(f"{'mcp_bridge module':<28} {'bytes':>9}")
    for module, size in modules.most_common():
        print(f"{module:<28} {size:>9}")


main()
