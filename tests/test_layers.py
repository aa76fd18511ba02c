"""edgekit's packages stand in layers, and imports point down: a package imports only from its own layer or below.

Every import counts, lazy or not (the graph is `test_import_layers.import_graph`: imports inside functions included).
There are none upward: where a stage needs what a package above it owns, it asks ``edgekit.core.handlers`` by name
(tests/test_handlers.py). ``python tests/test_layers.py`` prints the house's measures: the upward imports, package
cycles, modules per package, and how many of edgekit's imports of its own modules sit inside functions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_import_layers import PACKAGE_DIR, import_graph  # noqa: E402

# Bottom first. `board` imports nothing of edgekit (bundles carry it as their own package).
LAYERS: list[tuple[str, ...]] = [
    ("_version", "board"),
    ("core",),
    ("data", "native", "models", "records"),
    ("formats",),
    ("sources", "userdata"),
    ("bundle",),
    ("emulate",),
    ("bench",),
    ("estimate",),
    ("fidelity",),
    ("quantize",),
    ("export",),
    ("gates",),
    ("remote",),
    ("llm",),
    ("serve",),
    ("train",),
    ("pipeline",),
    ("cli",),
    ("api", "__main__", "edgekit"),
]

RANK = {package: layer for layer, packages in enumerate(LAYERS) for package in packages}


def package_of(module: str) -> str:
    parts = module.split(".")
    return "edgekit" if len(parts) == 1 else parts[1]


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(module, target) for module, targets in graph.items() for target in targets
            if RANK[package_of(target)] > RANK[package_of(module)]}


def test_every_package_has_a_layer():
    packages = {package_of(module) for module in import_graph()}
    assert packages <= set(RANK), f"packages without a layer in LAYERS: {sorted(packages - set(RANK))}"


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of two or more packages that import each other, directly or round a loop (Tarjan)."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_imports_point_down_the_layers():
    found = sorted(upward_imports(import_graph()))
    assert not found, "upward imports (a package importing from a layer above it; ask edgekit.core.handlers):\n" + \
        "\n".join(f"  {module} -> {target}" for module, target in found)


def test_no_two_packages_import_each_other():
    assert package_cycles(import_graph()) == []
    # the finder itself: a loop through three packages is one group, a package's own modules are no loop
    loop = {"edgekit.a.x": {"edgekit.b.y"}, "edgekit.b.y": {"edgekit.c.z"}, "edgekit.c.z": {"edgekit.a.w"},
            "edgekit.a.w": {"edgekit.a.x"}, "edgekit.d.v": {"edgekit.a.x"}}
    assert package_cycles(loop) == [["a", "b", "c"]]


def test_the_layer_check_sees_a_lazy_upward_import(tmp_path):
    pkg = tmp_path / "edgekit"
    for folder in ("core", "cli"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "main.py").write_text("from edgekit.core import util\n")
    (pkg / "core" / "util.py").write_text("def f():\n    from edgekit.cli import main  # lazy, still upward\n")
    assert upward_imports(import_graph(pkg)) == {("edgekit.core.util", "edgekit.cli.main")}


def _own_imports(path: Path) -> tuple[int, int]:
    """(imports of edgekit modules, how many of them sit inside a function)."""
    total = inside = 0

    def visit(node: ast.AST, in_function: bool) -> None:
        nonlocal total, inside
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                own = child.level > 0 or (child.module or "").split(".")[0] == "edgekit"
            elif isinstance(child, ast.Import):
                own = any(alias.name.split(".")[0] == "edgekit" for alias in child.names)
            else:
                own = False
            if own:
                total += 1
                inside += in_function
            visit(child, nested)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return total, inside


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_import_and_help_stay_light():
    """A lazy import of numpy moved to the top of a module on the CLI's path fails here, in the fast subset."""
    heavy = _python(
        "import sys, edgekit; from edgekit.cli.app import app;"
        "print(' '.join(m for m in ('torch', 'onnxruntime', 'onnx', 'numpy') if m in sys.modules))"
    )
    assert heavy.strip() == ""
    proc = subprocess.run([sys.executable, "-m", "edgekit", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "pipeline" in proc.stdout and "quantize" in proc.stdout
    heavy = _python(
        "import sys; sys.argv=['edgekit', '--help'];\n"
        "from edgekit.cli.app import app\n"
        "try: app()\nexcept SystemExit: pass\n"
        "print('LOADED', ' '.join(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    )
    assert heavy.strip().endswith("LOADED")


def measures() -> dict:
    graph = import_graph()
    files = sorted(PACKAGE_DIR.rglob("*.py"))
    counts = [_own_imports(path) for path in files]
    return {
        "modules": len(files),
        "modules_at_the_package_root": sorted(p.name for p in PACKAGE_DIR.glob("*.py")),
        "modules_per_package": dict(sorted(Counter(package_of(m) for m in graph).items())),
        "upward_imports": len(upward_imports(graph)),
        "package_cycles": package_cycles(graph),
        "imports_of_edgekit_modules": sum(total for total, _ in counts),
        "of_them_inside_functions": sum(inside for _, inside in counts),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(measures(), indent=1))
