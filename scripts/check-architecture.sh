#!/usr/bin/env bash
# Keeps ARCHITECTURE.md's map true:
# - the crate graph: the table between its "crate-graph" markers must list,
#   for every workspace crate, exactly the workspace crates it depends on,
#   normal and build dependencies apart, as `cargo metadata` reads them;
# - the TPM layer's module order: the list between its "tpm-modules"
#   markers must name every module of crates/tpm/src once, and each module
#   may import (a `super::` or `crate::` path outside its test module) only
#   modules of earlier steps;
# - the size rule of "Where tests go": no source file of crates/*/src or
#   src/ other than a tests.rs is over 1,200 lines.
# Exits 1 with the differences otherwise. Needs cargo and python3; no network.
set -euo pipefail
cd "$(dirname "$0")/.."

metadata=$(mktemp)
trap 'rm -f "$metadata"' EXIT
cargo metadata --format-version 1 --no-deps --offline --locked >"$metadata"

python3 - "$metadata" ARCHITECTURE.md <<'PY'
import json
import re
import sys

metadata, architecture = sys.argv[1], sys.argv[2]
packages = json.load(open(metadata))["packages"]
ours = {p["name"] for p in packages}
actual = {}
for p in packages:
    deps = {"normal": set(), "build": set()}
    for d in p["dependencies"]:
        kind = d["kind"] or "normal"
        if d["name"] in ours and kind in deps:
            deps[kind].add(d["name"])
    actual[p["name"]] = deps

text = open(architecture).read()
found = re.search(r"<!-- crate-graph: begin -->\n(.*?)<!-- crate-graph: end -->", text, re.S)
if not found:
    sys.exit("ARCHITECTURE.md: no <!-- crate-graph: begin --> ... end --> table")
written = {}
for line in found.group(1).splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 3 or not cells[0].startswith("`"):
        continue
    names = lambda cell: set(re.findall(r"`([^`]+)`", cell))
    crate = cells[0].strip("`")
    written[crate] = {"normal": names(cells[1]), "build": names(cells[2])}

problems = []
for crate in sorted(ours | set(written)):
    if crate not in written:
        problems.append(f"{crate}: a workspace crate missing from the table")
        continue
    if crate not in actual:
        problems.append(f"{crate}: in the table but not a workspace crate")
        continue
    for kind in ("normal", "build"):
        extra = written[crate][kind] - actual[crate][kind]
        missing = actual[crate][kind] - written[crate][kind]
        if extra:
            problems.append(f"{crate}: the table says {kind} dependencies {sorted(extra)} that Cargo.toml does not have")
        if missing:
            problems.append(f"{crate}: Cargo.toml has {kind} dependencies {sorted(missing)} that the table does not list")

# The TPM layer's module order.
import glob
import os

found = re.search(r"<!-- tpm-modules: begin -->\n(.*?)<!-- tpm-modules: end -->", text, re.S)
if not found:
    sys.exit("ARCHITECTURE.md: no <!-- tpm-modules: begin --> ... end --> list")
steps = []
for item in re.split(r"\n(?=\d+\. )", found.group(1).strip()):
    # A module is named in backquotes where it opens the item or follows a
    # comma; words in backquotes inside parentheses are not modules.
    plain = re.sub(r"\([^()]*\)", "", item)
    steps.append(re.findall(r"`([a-z_]+)`", plain))
step_of = {}
for index, modules in enumerate(steps):
    for module in modules:
        if module in step_of:
            problems.append(f"tpm-modules: {module} is listed twice")
        step_of[module] = index
sources = {
    os.path.basename(path)[:-3]: open(path).read()
    for path in glob.glob("crates/tpm/src/*.rs")
    if os.path.basename(path) != "lib.rs"
}
for module, source in sorted(sources.items()):
    if module not in step_of:
        problems.append(f"tpm-modules: crates/tpm/src/{module}.rs is not in the list")
        continue
    tests = source.find("#[cfg(test)]\nmod tests")
    if tests >= 0:
        source = source[:tests]
    used = set(re.findall(r"(?:super|crate)::([a-z_]+)", source)) & set(sources)
    for other in sorted(used - {module}):
        if step_of.get(other, len(steps)) >= step_of[module]:
            problems.append(
                f"tpm-modules: {module} (step {step_of[module] + 1}) imports {other} "
                f"(step {step_of.get(other, 0) + 1}): only earlier steps may be imported"
            )
for module in sorted(set(step_of) - set(sources)):
    problems.append(f"tpm-modules: {module} is listed but crates/tpm/src/{module}.rs does not exist")

# No product source file over 1,200 lines.
for root in ["src"] + sorted(glob.glob("crates/*/src")):
    for path in sorted(glob.glob(f"{root}/**/*.rs", recursive=True)):
        if os.path.basename(path) == "tests.rs":
            continue
        lines = sum(1 for _ in open(path))
        if lines > 1200:
            problems.append(f"{path}: {lines} lines, over the 1,200 of ARCHITECTURE.md (\"Where tests go\")")

if problems:
    print("ARCHITECTURE.md's map differs from the code:")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print(
    f"ARCHITECTURE.md's crate graph matches cargo metadata ({len(ours)} crates), "
    f"and crates/tpm's {len(sources)} modules import in its order"
)
PY
