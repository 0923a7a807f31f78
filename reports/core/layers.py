"""Lines per package and package-level import edges of a checkout (grimp, as import-linter uses).

    python reports/core/layers.py <checkout>/src > layers.json
"""
import sys, grimp, pathlib, collections, json
src = sys.argv[1]
sys.path.insert(0, src)
for m in list(sys.modules):
    if m == "hat" or m.startswith("hat."): del sys.modules[m]
# env may be a namespace package in the old tree
g = grimp.build_graph("hat", include_external_packages=False)
def pkg(m):
    parts = m.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else m
edges = collections.Counter()
for imp in g.modules:
    for dst in g.find_modules_directly_imported_by(imp):
        a, b = pkg(imp), pkg(dst)
        if a != b: edges[(a, b)] += 1
lines = collections.Counter()
for f in pathlib.Path(src, "hat").rglob("*.py"):
    rel = f.relative_to(src).with_suffix("")
    lines[pkg(".".join(rel.parts))] += sum(1 for _ in f.open())
core = ("hat.harness", "hat.models")
print(json.dumps({"lines": dict(sorted(lines.items())), "edges_total": sum(1 for _ in edges),
  "core_out": sorted(f"{a} -> {b}" for (a, b) in edges if a in core and b not in core and b not in ("hat.errors", "hat.textio")),
  "into_env": sorted(f"{a} -> {b}" for (a, b) in edges if b == "hat.env")}, indent=1))
