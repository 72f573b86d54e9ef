#!/usr/bin/env python3
"""Writes a C program that prints the size of every TPM and TSS structure
and union tss-esapi-sys's bindings describe, and the offset of each field,
one line each ("TPMS_ATTEST size 2304", "TPMS_ATTEST.extraData offset 48").

The bindings were generated once, by tss-esapi-sys, and compiled into
sceau: the binary assumes their layouts whatever tpm2-tss it later links.
Compiled against a Debian suite's libtss2-dev and run there, the program
shows that suite's layouts; scripts/check-deb-suites.sh compares them with
the bindings' own figures and across suites.

Usage: tss-layouts.py BINDINGS.rs > layouts.c
       tss-layouts.py --expected BINDINGS.rs   (the bindings' own figures,
       in the same line format, from their bindgen layout tests)
"""
import re
import sys

PREFIXES = ("TPM", "TSS2", "ESYS")


def items(text):
    """(kind, name, [fields]) for each `pub struct|union NAME { ... }`."""
    for m in re.finditer(r"^pub (struct|union) (\w+) \{\n(.*?)^\}", text, re.S | re.M):
        kind, name, body = m.groups()
        # Opaque types (`_unused`, a declaration without a definition) have
        # no layout to check.
        if not name.startswith(PREFIXES) or "_unused" in body or "OPAQUE" in name:
            continue
        fields = re.findall(r"^\s+pub (\w+): ", body, re.M)
        yield kind, name, [f for f in fields if not f.startswith("__")]


def c_field(field):
    # bindgen appends "_" to names that are Rust keywords (type_).
    return field[:-1] if field.endswith("_") and field[:-1] in ("type",) else field


def program(text):
    out = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <tss2/tss2_esys.h>",
        "#include <tss2/tss2_mu.h>",
        "#include <tss2/tss2_tctildr.h>",
        "int main(void) {",
    ]
    for _, name, fields in items(text):
        out.append(f'    printf("%s size %zu\\n", "{name}", sizeof({name}));')
        for field in fields:
            out.append(
                f'    printf("%s.%s offset %zu\\n", "{name}", "{field}", offsetof({name}, {c_field(field)}));'
            )
    out += ["    return 0;", "}"]
    return "\n".join(out) + "\n"


def expected(text):
    lines = []
    for m in re.finditer(r"size_of::<(\w+)>\(\),\s*(\d+)usize", text):
        if m.group(1).startswith(PREFIXES):
            lines.append(f"{m.group(1)} size {m.group(2)}")
    for m in re.finditer(
        r"addr_of!\(\(\*ptr\)\.(\w+)\) as usize - ptr as usize \},\s*(\d+)usize,\s*concat!\(\s*\"Offset of field: \",\s*stringify!\((\w+)\)",
        text,
    ):
        field, offset, name = m.groups()
        if name.startswith(PREFIXES) and not field.startswith("__"):
            lines.append(f"{name}.{field} offset {offset}")
    return "\n".join(sorted(lines)) + "\n"


def main():
    args = sys.argv[1:]
    if args and args[0] == "--expected":
        sys.stdout.write(expected(open(args[1]).read()))
    elif len(args) == 1:
        sys.stdout.write(program(open(args[0]).read()))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
