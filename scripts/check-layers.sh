#!/usr/bin/env bash
# The layer rule, checked against the build: every crate's dependencies (as cargo resolves
# them, through other crates too) against the table "Layers" in docs/ARCHITECTURE.md.
#
#   scripts/check-layers.sh           exit 0, or 1 with one line per broken rule
#
# The table's rows are `| crate | never depends on … |`: a row's crate may not reach any of the
# named packages through normal dependencies (dev-dependencies are the tests' own). Two rules
# are built in: only tli-cli depends on clap directly, and tli-testkit is a dev-dependency only
# (tests/, which is itself a test crate, may use it as a normal one). Run by `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-python3}"
cargo metadata --quiet --format-version 1 --locked >/tmp/tli-layers.$$.json
trap 'rm -f /tmp/tli-layers.$$.json' EXIT

"$python_bin" - /tmp/tli-layers.$$.json docs/ARCHITECTURE.md <<'PYEOF'
import json, re, sys

meta = json.load(open(sys.argv[1]))
doc = open(sys.argv[2]).read()

# The table under the "Layers" heading.
section = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
if not section:
    sys.exit("check-layers: docs/ARCHITECTURE.md has no '## Layers' section with the table")
rules = {}
for line in section.group(1).splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 2 or not cells[0].startswith("`"):
        continue
    crate = cells[0].strip("`")
    never = re.findall(r"`([A-Za-z0-9_-]+)`", cells[1])
    rules[crate] = never
if not rules:
    sys.exit("check-layers: the Layers table in docs/ARCHITECTURE.md has no rows")

packages = {p["id"]: p for p in meta["packages"]}
members = {pid: packages[pid]["name"] for pid in meta["workspace_members"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

def normal_deps(pid):
    for dep in nodes[pid]["deps"]:
        kinds = {k["kind"] for k in dep["dep_kinds"]}
        if None in kinds:  # a normal dependency (not dev, not build)
            yield dep["pkg"]

def reach(pid):
    seen, stack, via = set(), [pid], {}
    while stack:
        cur = stack.pop()
        for d in normal_deps(cur):
            if d not in seen:
                seen.add(d)
                via[d] = cur
                stack.append(d)
    return seen, via

def path_to(pid, target, via):
    chain = [target]
    while chain[-1] != pid:
        chain.append(via[chain[-1]])
    return " -> ".join(packages[p]["name"] for p in reversed(chain))

broken = []
names = set(members.values())
for crate in rules:
    if crate not in names:
        broken.append(f"the Layers table names {crate}, which is not a workspace crate")
for pid, name in members.items():
    reached, via = reach(pid)
    for forbidden in rules.get(name, []):
        for d in reached:
            if packages[d]["name"] == forbidden:
                broken.append(f"{name} must never depend on {forbidden}, but does: {path_to(pid, d, via)}")
    for dep in nodes[pid]["deps"]:
        dname = packages[dep["pkg"]]["name"]
        normal = any(k["kind"] is None for k in dep["dep_kinds"])
        if dname == "clap" and name != "tli-cli":
            broken.append(f"{name} depends on clap: only tli-cli knows clap (take the arguments from tli_cli::args)")
        if dname == "tli-testkit" and normal and name != "tli-e2e-tests":
            broken.append(f"{name} depends on tli-testkit as a normal dependency: test fixtures are dev-dependencies only")

for line in broken:
    print(f"check-layers: {line}")
print(f"check-layers: {len(members)} crates, {sum(len(v) for v in rules.values())} rules, {len(broken)} broken")
sys.exit(1 if broken else 0)
PYEOF
