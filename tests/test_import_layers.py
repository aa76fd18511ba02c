"""Dependencies point one way: no import cycle among edgekit's modules.

Every module under edgekit/ is parsed with `ast`, and every import counts, including those inside
functions (a lazy import that closes a circle is still a circle: the two modules cannot be
understood, tested or moved apart). A cycle is reported as the chain of modules that forms it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import edgekit

PACKAGE_DIR = Path(edgekit.__file__).resolve().parent

# Cycles tolerated on purpose, each with its reason. Keys are frozensets of the modules in the cycle.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package_dir: Path) -> dict[str, Path]:
    return {_module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The edgekit module `name` lives in (a name may be `pkg.module.attribute`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import sub` depends on the submodule pkg.sub, `from pkg.mod import name` on
            # pkg.mod (the parent packages that run on the way are not counted: a package's
            # __init__ that re-exports its modules would otherwise close a circle with each of them).
            targets = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix
                       for alias in node.names]
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved and resolved != module:
                found.add(resolved)
    return found


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its body)."""
    modules = _modules(package_dir)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); returns components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return paths[node] + [start]
                if child not in paths:
                    paths[child] = paths[node] + [child]
                    nxt.append(child)
        frontier = nxt
    return component


def test_graph_sees_lazy_relative_and_absolute_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b  # lazy\n    return b\n")
    (pkg / "b.py").write_text("from . import c\nfrom .sub.d import thing\n")
    (pkg / "c.py").write_text("import os\nimport pkg.a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("from ..c import x\nthing = 1\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.c", "pkg.sub.d"}
    assert graph["pkg.c"] == {"pkg.a"} and graph["pkg.sub.d"] == {"pkg.c"}
    (component,) = _strongly_connected(graph)
    assert component == ["pkg.a", "pkg.b", "pkg.c", "pkg.sub.d"]
    assert _cycle_in(component, graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    (component,) = _strongly_connected(graph)
    assert component == ["a", "b", "c"]
    assert _cycle_in(component, graph) == ["a", "b", "c", "a"]


def test_no_import_cycles_among_edgekit_modules():
    graph = import_graph()
    problems = []
    for component in _strongly_connected(graph):
        if frozenset(component) in ALLOWED_CYCLES:
            continue
        problems.append(" -> ".join(_cycle_in(component, graph)) + f"  (component: {', '.join(component)})")
    assert not problems, "import cycles among edgekit modules:\n" + "\n".join(problems)
