"""calc/ is layered: core < spec < cost < serving < accuracy, render, plot < cli, imports only downward.

Every import in every module (module level or inside a function) is read from the source with ast,
so a lazy import cannot hide an upward edge. `cost` reads no files, and there is no import cycle
between modules anywhere in calc/ and validate/.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = {"core": 0, "spec": 1, "cost": 2, "serving": 3, "accuracy": 4, "render": 4, "plot": 4, "cli": 5}
# Siblings at rank 4 import each other only as listed: reports (accuracy, render) embed charts (plot).
SIBLINGS = {("accuracy", "render"), ("render", "plot"), ("accuracy", "plot")}


def _modules(top: str) -> dict[str, Path]:
    out = {}
    for p in (ROOT / top).rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            out.update(id(n) for n in ast.walk(node))
    return out


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


MODULES = {**_modules("calc"), **_modules("validate")}
GRAPH = {m: {i for i in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "calc" and len(parts) > 2 and parts[1] in RANK else None


def test_calc_imports_only_downward():
    upward = []
    for mod, deps in GRAPH.items():
        here = _layer(mod)
        if here is None:
            continue
        for dep in deps:
            there = _layer(dep)
            if dep.startswith("validate"):
                if (mod, dep) != ("calc.cli.app", "validate.cli"):  # the one mount point, torch-free at import
                    upward.append(f"{mod} -> {dep}")
            elif there is None or there == here:
                continue
            elif RANK[there] > RANK[here] or (RANK[there] == RANK[here] and (here, there) not in SIBLINGS):
                upward.append(f"{mod} -> {dep}")
    assert upward == []


def test_cost_reads_no_files():
    readers = ("open(", "read_text(", "read_bytes(", "yaml.", "importlib.resources")
    offenders = [m for m, p in MODULES.items() if _layer(m) == "cost"
                 and any(r in p.read_text() for r in readers)]
    assert offenders == []


def test_no_import_cycles():
    # Packages import their submodules' names, so an edge to a package is an edge to its __init__.
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for d in GRAPH[m]:
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert cycles == []
