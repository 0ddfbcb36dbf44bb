"""calc/ is layered: core < spec < cost < (the calc facade) < serving < accuracy, render, plot < cli
< web (and calc.bench above all), imports only downward.

Every import in every module (module level or inside a function, absolute or relative, or through
importlib.import_module with a literal name) is read from the source with ast, so a lazy import
cannot hide an upward edge. `cost` reads no files (checked by running it with every reader
refused), and there is no import cycle between modules anywhere in calc/ and validate/.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = {"core": 0, "spec": 1, "cost": 2, "facade": 2.5, "serving": 3, "accuracy": 4, "render": 4, "plot": 4,
        "cli": 5, "web": 6, "bench": 7}
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


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_only(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            if name:
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
    return found


def _is_import_module(func: ast.AST) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or \
        (isinstance(func, ast.Name) and func.id in ("import_module", "__import__"))


MODULES = {**_modules("calc"), **_modules("validate")}
GRAPH = {m: {i for i in _imports(p, m) if i in MODULES and i != m} for m, p in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "calc":
        return None
    if len(parts) == 1:
        return "facade"  # calc/__init__.py: estimate and sweep over names, for library users
    if parts[1] == "bench":
        return "bench"
    return parts[1] if len(parts) > 2 and parts[1] in RANK else None


def test_calc_imports_only_downward():
    upward = []
    for mod, deps in GRAPH.items():
        here = _layer(mod)
        if here is None:
            continue
        for dep in deps:
            there = _layer(dep)
            if dep.startswith("validate"):  # calc.cli.app mounts validate.cli by name (validation_package)
                upward.append(f"{mod} -> {dep}")
            elif there is None or there == here:
                continue
            elif (mod, dep) == ("calc.cli.app", "calc.web.command"):  # the serve mount point: typer only at import
                continue
            elif RANK[there] > RANK[here] or (RANK[there] == RANK[here] and (here, there) not in SIBLINGS):
                upward.append(f"{mod} -> {dep}")
    assert upward == []


def test_cost_reads_no_files():
    readers = ("open(", "read_text(", "read_bytes(", "yaml.", "importlib.resources")
    offenders = [m for m, p in MODULES.items() if _layer(m) == "cost"
                 and any(r in p.read_text() for r in readers)]
    assert offenders == []


def test_cost_reads_no_files_when_it_runs(monkeypatch):
    """The grep above cannot see a spec-layer helper that cost calls (an engine preset resolved on
    first use): build the specs, forget every cached file, refuse every read, then run cost."""
    import builtins

    import numpy as np

    from calc.cost.latency import estimate, mixed_step_cost
    from calc.cost.setup import Setup
    from calc.spec import engine
    from calc.spec.catalog import load_hardware, load_model

    model, moe = load_model("llama-3.1-8b"), load_model("mixtral-8x7b")
    hws = [load_hardware(h).with_engine(e) for h, e in (("h100-sxm", "vllm"), ("l4", None), ("a100-80gb-sxm", "hf"))]
    engine._catalog_bodies.cache_clear()
    engine._catalog_preset.cache_clear()

    def refused(*args, **kwargs):
        raise AssertionError(f"cost read a file: {args[:1]}")

    monkeypatch.setattr(builtins, "open", refused)
    for name in ("read_text", "read_bytes", "open"):
        monkeypatch.setattr(Path, name, refused)
    for hw in hws:
        for m, setup in ((model, Setup.of(tp=2)), (moe, Setup.of(tp=2, ep=2))):
            estimate(m, hw, 4, 1024, 64, setup)
            mixed_step_cost(m, hw, np.array([1.0, 512.0]), np.array([900.0, 0.0]), *_resolved(m, hw, setup))


def _resolved(model, hw, setup):
    r = setup.resolve(model, hw)
    return r.dtypes, r.efficiency, r.attention, r.parallel


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
