"""The package's layers point one way and its modules form no import circle.

Every module of airflow_deltaberg is parsed with ast; every import statement counts, at module level or inside a
function (a lazy import still ties the two modules together). Layers, lowest first:

  0 core base: the package root, version, core.errors, core.redact, core.storage, core.arrow_util, ...
  1 core.delta
  2 core.compat, core.iceberg
  3 core.enable, core.watch
  4 airflow_deltaberg.spark (PySpark applications; no Airflow)
  5 cli, operators, sensors, triggers, hooks, notifications, provider_info, version_compat
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "airflow_deltaberg"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

#: Module-name prefixes and their layer; the longest matching prefix wins.
LAYERS: dict[str, int] = {
    f"{PACKAGE}": 0,
    f"{PACKAGE}.version": 0,
    f"{PACKAGE}.core": 0,
    f"{PACKAGE}.core.delta": 1,
    f"{PACKAGE}.core.compat": 2,
    f"{PACKAGE}.core.iceberg": 2,
    f"{PACKAGE}.core.enable": 3,
    f"{PACKAGE}.core.watch": 3,
    f"{PACKAGE}.spark": 4,
    f"{PACKAGE}.cli": 5,
    f"{PACKAGE}.operators": 5,
    f"{PACKAGE}.sensors": 5,
    f"{PACKAGE}.triggers": 5,
    f"{PACKAGE}.hooks": 5,
    f"{PACKAGE}.notifications": 5,
    f"{PACKAGE}.provider_info": 5,
    f"{PACKAGE}.version_compat": 5,  # the Airflow names that moved between 3.1 and 3.3
}

#: Modules of the core base (layer 0) by name; any other core module directly under core/ is a mistake.
CORE_BASE = {"errors", "redact", "storage", "storage_calls", "arrow_util", "memory_pool", "read_ahead", "display"}

#: Top-level packages nothing under core may import.
CORE_FORBIDDEN = ("pyspark", "airflow", f"{PACKAGE}.spark")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} (line {self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import in the module, resolved to the module it loads (a submodule where ``from pkg import sub``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_relative(name, is_package, node.level, node.module) if node.level else (node.module or "")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append(Import(name, submodule if submodule in modules else source, node.lineno))
    return found


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > best[0]:
                best = (len(prefix), layer)
    return None if best is None else best[1]


def all_imports() -> list[Import]:
    """Every import of the package, one per importing module, target and line."""
    modules = package_modules()
    found = [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]
    return list(dict.fromkeys(found))


def upward_imports(imports: list[Import]) -> list[str]:
    found = []
    for imp in imports:
        if not imp.target.startswith(PACKAGE):
            continue
        low, high = layer_of(imp.importer), layer_of(imp.target)
        if low is not None and high is not None and high > low:
            found.append(f"{imp} : layer {low} imports layer {high}")
    return found


def core_forbidden_imports(imports: list[Import]) -> list[str]:
    return [
        str(imp)
        for imp in imports
        if imp.importer.startswith(f"{PACKAGE}.core")
        and any(imp.target == bad or imp.target.startswith(bad + ".") for bad in CORE_FORBIDDEN)
    ]


def import_cycles(imports: list[Import], modules: set[str] | None = None) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), each as a closed path of module names."""
    graph: dict[str, set[str]] = {}
    modules = set(package_modules()) if modules is None else modules
    for imp in imports:
        if imp.target in modules and imp.target != imp.importer:
            graph.setdefault(imp.importer, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(modules):
        if node not in index:
            visit(node)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest closed path through the group's first module (breadth-first inside the group)."""
    start = min(group)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, set()) & group):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    return sorted(group)


def test_every_module_has_a_layer() -> None:
    unmapped = [name for name in package_modules() if layer_of(name) is None]
    stray_core = [
        name
        for name in package_modules()
        if name.count(".") == 2
        and name.startswith(f"{PACKAGE}.core.")
        and layer_of(name) == 0
        and name.rsplit(".", 1)[1] not in CORE_BASE
    ]
    assert not unmapped, f"modules outside every layer: {unmapped}"
    assert not stray_core, f"modules directly under core that are not the core base: {stray_core}"


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    violations = upward_imports(all_imports())
    assert not violations, "imports pointing up the layers:\n" + "\n".join(violations)


def test_core_imports_no_spark_and_no_airflow() -> None:
    violations = core_forbidden_imports(all_imports())
    assert not violations, "core imports pyspark, airflow or the Spark applications:\n" + "\n".join(violations)


def test_spark_applications_import_no_airflow() -> None:
    """spark-submit runs them on a cluster where Airflow is not installed."""
    violations = [
        str(imp)
        for imp in all_imports()
        if imp.importer.startswith(f"{PACKAGE}.spark")
        and (imp.target == "airflow" or imp.target.startswith("airflow."))
    ]
    assert not violations, "the Spark applications import Airflow:\n" + "\n".join(violations)


def test_no_import_circle() -> None:
    cycles = import_cycles(all_imports())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_walker_sees_lazy_relative_and_plain_imports(tmp_path: Path) -> None:
    """The walker itself: function-level, relative and `import x` statements all resolve to their module."""
    pkg = tmp_path / PACKAGE / "core" / "delta"
    pkg.mkdir(parents=True)
    source = pkg / "sample.py"
    source.write_text(
        "import airflow_deltaberg.spark.x\n"
        "from ..compat import rules\n"
        "def lazy():\n"
        "    from airflow_deltaberg.core.iceberg.publish import publish\n",
        encoding="utf-8",
    )
    modules = {f"{PACKAGE}.core.compat.rules": Path("rules.py")}
    found = imports_of(f"{PACKAGE}.core.delta.sample", source, modules)
    assert [imp.target for imp in found] == [
        f"{PACKAGE}.spark.x",
        f"{PACKAGE}.core.compat.rules",
        f"{PACKAGE}.core.iceberg.publish",
    ]
    assert len(upward_imports(found)) == 3
    assert core_forbidden_imports(found) == [str(found[0])]

    loop = [Import("a", "b", 1), Import("b", "c", 1), Import("c", "a", 1), Import("c", "d", 1)]
    assert import_cycles(loop, {"a", "b", "c", "d"}) == [["a", "b", "c", "a"]]
    assert import_cycles(loop[:2], {"a", "b", "c"}) == []
