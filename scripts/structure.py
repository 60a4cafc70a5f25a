#!/usr/bin/env python3
"""The library's structure, checked against ARCHITECTURE.md.

Fails (exit 1, one line per finding) when:
- two modules of src/ import each other, directly or through others
  (`use crate::x`, `crate::{x, y}` and inline `crate::x::...` paths all
  count; unit tests are left out);
- a module imports one that ARCHITECTURE.md's layer table puts below it
  (a module may use those in its own row and the rows above);
- a module of src/ is missing from that table;
- a function of the library (src/, not the command) is over 100 lines;
- a module below the kinds floor (the row of `fair`) names a kind
  (`Kind::`): below it a kind is a `protocol::Kind`, passed on and asked
  through its methods; the kind's own protocol file
  (src/protocol/<kind>.rs) may.

Run from the repository root: python3 scripts/structure.py
"""

import os
import re
import sys

MAX_FN_LINES = 100
SRC = "src"


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3]
    if rel.startswith("protocol"):
        return "protocol"
    return rel


def strip(text):
    """The code without unit tests and comments."""
    m = re.search(r"\n#\[cfg\(test\)\]\s*\n(pub(\(crate\))? )?mod tests", text)
    if m:
        text = text[: m.start()]
    return re.sub(r"//[^\n]*", "", text)


def library_files():
    for d, _, files in os.walk(SRC):
        if d.startswith(os.path.join(SRC, "bin")):
            continue
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def imports():
    deps = {}
    for path in library_files():
        name = module_of(path)
        text = strip(open(path, encoding="utf-8").read())
        found = deps.setdefault(name, set())
        for group in re.finditer(r"crate::\{([^}]*)\}", text):
            for part in group.group(1).split(","):
                part = part.strip()
                if part:
                    found.add(part.split("::")[0])
        for m in re.finditer(r"crate::(\w+)", text):
            found.add(m.group(1))
    names = set(deps)
    return {k: {d for d in v if d in names and d != k} for k, v in deps.items()}


def layers():
    """Module -> row of ARCHITECTURE.md's layer table (0 is the top)."""
    rows = {}
    text = open("ARCHITECTURE.md", encoding="utf-8").read()
    table = text.split("## Layers, bottom up", 1)[1].split("\n\n")
    body = next(t for t in table if t.lstrip().startswith("| layer"))
    for i, line in enumerate(body.strip().splitlines()[2:]):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for m in re.finditer(r"`([\w/]+)(\.rs|/)`", cells[1]):
            rows[m.group(1)] = i
    return rows


def cycles(deps):
    """Every import circle, as lists of modules."""
    found, index, low, stack, on, n = [], {}, {}, [], set(), [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return found


def long_functions():
    for path in library_files():
        lines = strip(open(path, encoding="utf-8").read()).split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"^(\s*)(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?fn (\w+)", line)
            if not m or line.rstrip().endswith(";"):
                continue
            indent = m.group(1)
            if "{" in line and line.count("{") == line.count("}"):
                continue  # a one-line function
            for j in range(i + 1, len(lines)):
                if lines[j].startswith(indent + "}") and not lines[j][len(indent) :].startswith(" "):
                    if j - i + 1 > MAX_FN_LINES:
                        yield path, m.group(7), j - i + 1
                    break


def main():
    problems = []
    deps = imports()
    rows = layers()
    for c in cycles(deps):
        problems.append("import circle: " + " <-> ".join(c))
    for mod in sorted(deps):
        if mod not in rows and mod != "lib":
            problems.append(f"{mod}: not in ARCHITECTURE.md's layer table")
    for mod, used in sorted(deps.items()):
        for d in sorted(used):
            if mod in rows and d in rows and rows[d] > rows[mod]:
                problems.append(f"{mod} imports {d}, which ARCHITECTURE.md puts below it")
    floor = rows.get("fair")
    for path in library_files():
        mod = module_of(path)
        own_protocol = mod == "protocol" and not path.endswith("mod.rs")
        if floor is not None and mod in rows and rows[mod] < floor and not own_protocol:
            text = strip(open(path, encoding="utf-8").read())
            for m in re.finditer(r"\bKind::\w+", text):
                line = text[: m.start()].count("\n") + 1
                problems.append(f"{path}:{line}: {m.group(0)} below the kinds floor")
    for path, name, n in long_functions():
        problems.append(f"{path}: fn {name} is {n} lines (at most {MAX_FN_LINES})")
    for p in problems:
        print("structure:", p)
    print(f"structure: {len(deps)} modules, {sum(len(v) for v in deps.values())} imports, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
