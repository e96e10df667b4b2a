#!/usr/bin/env python3
"""Prints the module graph of compiler/src/lower (which sibling modules each
module names through `super::`) and any import cycle among the children
(`mod.rs`, the driver, is left out: every child is its child). A module in
a folder counts as its folder; `super::` and `crate::lower::` paths count,
doc links included."""
import pathlib, re, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "compiler/src/lower")
mods = {}
for p in sorted(root.rglob("*.rs")):
    rel = p.relative_to(root).with_suffix("")
    name = str(rel.parent if rel.name == "mod" else rel).replace("/", "::")
    if name == ".":
        continue
    text = p.read_text()
    uses = set(re.findall(r"super::(\w+)", text)) | set(re.findall(r"crate::lower::(\w+)", text))
    for group in re.findall(r"use super::\{([^}]*)\}", text):
        uses |= {u.strip().split("::")[0] for u in group.split(",")}
    top = name.split("::")[0]
    mods.setdefault(top, set()).update(u for u in uses if u != top)
names = set(mods)
graph = {m: sorted(u for u in deps if u in names) for m, deps in mods.items()}
for m in sorted(graph):
    print(f"{m:12} -> {', '.join(graph[m])}")
# cycles: strongly connected components of size > 1
index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in graph[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(sorted(comp))
for v in sorted(graph):
    if v not in index: visit(v)
print("cycles:", out if out else "none")
sys.exit(1 if out else 0)
