"""The package's layers point one way, its modules form no import circle, and what docs/ARCHITECTURE.md says
each layer knows nothing of it cannot reach, directly or through a chain of imports.

Every module of airflow_deltaberg is parsed with ast (tests/support/imports.py): every import statement counts, at
module level or inside a function. Every module is assigned a layer by name: a module no entry names fails (a new
module must be placed). Layers, lowest first:

  0 core base: the package root, version, core.errors, core.redact, core.storage, core.arrow_util, ...
  1 core.delta
  2 core.compat, core.iceberg (each knows nothing of the other)
  3 core.enable, core.watch, core.fleet, core.fleet_html, core.lake_page
  4 airflow_deltaberg.spark (PySpark applications; no Airflow)
  5 cli, operators, sensors, triggers, hooks, notifications, openlineage, plugins, provider_info, version_compat,
    assets
"""

from __future__ import annotations

import functools
from pathlib import Path

from support.imports import PACKAGE, Import, import_graph, imports_of, package_modules, reachable
from support.imports import all_imports as _all_imports

#: Modules assigned by their exact name.
MODULES: dict[str, int] = {
    PACKAGE: 0,
    f"{PACKAGE}.version": 0,
    f"{PACKAGE}.core": 0,
    **{f"{PACKAGE}.core.{name}": 0 for name in (
        "errors", "redact", "storage", "storage_calls", "arrow_util", "memory_pool", "read_ahead", "display")},
    f"{PACKAGE}.core.watch": 3,
    f"{PACKAGE}.core.fleet": 3,  # the fleet's tables and report (watch's versions)
    f"{PACKAGE}.core.fleet_html": 3,
    f"{PACKAGE}.core.lake_page": 3,  # the plugin page's HTML (no Airflow)
    f"{PACKAGE}.cli": 5,
    f"{PACKAGE}.provider_info": 5,
    f"{PACKAGE}.version_compat": 5,  # the Airflow names that moved between 3.1 and 3.3
    f"{PACKAGE}.assets": 5,  # Airflow's asset URI hooks (standard library only)
}

#: Packages assigned with every module under them.
PACKAGES: dict[str, int] = {
    f"{PACKAGE}.core.delta": 1,
    f"{PACKAGE}.core.compat": 2,
    f"{PACKAGE}.core.iceberg": 2,
    f"{PACKAGE}.core.enable": 3,
    f"{PACKAGE}.spark": 4,
    f"{PACKAGE}.operators": 5,
    f"{PACKAGE}.sensors": 5,
    f"{PACKAGE}.triggers": 5,
    f"{PACKAGE}.hooks": 5,
    f"{PACKAGE}.notifications": 5,
    f"{PACKAGE}.openlineage": 5,  # the operators' OpenLineage facets (the client imported lazily)
    f"{PACKAGE}.plugins": 5,  # the Airflow UI plugin and what it reads from Airflow's DB
}

#: What a part of the package may not load, directly or through any chain of imports (ARCHITECTURE.md, Layers).
KNOWS_NOTHING_OF: dict[str, tuple[str, ...]] = {
    f"{PACKAGE}.core": ("pyspark", "airflow", f"{PACKAGE}.spark"),
    f"{PACKAGE}.spark": ("airflow",),
    f"{PACKAGE}.core.compat": (f"{PACKAGE}.core.iceberg",),
    f"{PACKAGE}.core.iceberg": (f"{PACKAGE}.core.compat",),
}


@functools.cache
def all_imports() -> list[Import]:
    """The package's imports, parsed once for every test here."""
    return _all_imports()


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    """The module's layer: its exact entry, else the package entry it is under; None when nothing names it."""
    if module in MODULES:
        return MODULES[module]
    matches = [(len(prefix), layer) for prefix, layer in PACKAGES.items() if _under(module, prefix)]
    return max(matches)[1] if matches else None


def upward_imports(imports: list[Import]) -> list[str]:
    found = []
    for imp in imports:
        if not _under(imp.target, PACKAGE):
            continue
        low, high = layer_of(imp.importer), layer_of(imp.target)
        if low is not None and high is not None and high > low:
            found.append(f"{imp} : layer {low} imports layer {high}")
    return found


def forbidden_reaches(imports: list[Import], modules: set[str],
                      rules: dict[str, tuple[str, ...]] = KNOWS_NOTHING_OF) -> list[str]:
    """Every module under a key of ``rules`` that loads what the key forbids, with the chain that loads it."""
    graph = import_graph(imports)
    found = []
    for module in sorted(modules):
        banned = [bad for part, bads in rules.items() if _under(module, part) for bad in bads]
        chains = reachable(module, graph, modules) if banned else {}
        for bad in banned:
            hits = [chain for target, chain in chains.items() if _under(target, bad)]
            if hits:
                found.append(" -> ".join(min(hits, key=len)))
    return found


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


def test_every_module_is_assigned_a_layer() -> None:
    modules = package_modules()
    unassigned = [name for name in modules if layer_of(name) is None]
    stale = [name for name in [*MODULES, *PACKAGES] if name not in modules]
    assert not unassigned, f"modules no layer names (add them to MODULES or PACKAGES): {unassigned}"
    assert not stale, f"layer entries naming no module: {stale}"


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    violations = upward_imports(all_imports())
    assert not violations, "imports pointing up the layers:\n" + "\n".join(violations)


def test_no_part_loads_what_it_knows_nothing_of() -> None:
    """core loads no Spark and no Airflow, the Spark applications no Airflow (spark-submit runs them where Airflow
    is not installed), core.compat and core.iceberg not each other: through any chain of imports."""
    violations = forbidden_reaches(all_imports(), set(package_modules()))
    assert not violations, "chains loading what a layer knows nothing of:\n" + "\n".join(violations)


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
    modules = {f"{PACKAGE}.core.compat.rules"}
    found = imports_of(f"{PACKAGE}.core.delta.sample", source, modules)
    assert [imp.target for imp in found] == [
        f"{PACKAGE}.spark.x",
        f"{PACKAGE}.core.compat.rules",
        f"{PACKAGE}.core.iceberg.publish",
    ]
    assert len(upward_imports(found)) == 3

    loop = [Import("a", "b", 1), Import("b", "c", 1), Import("c", "a", 1), Import("c", "d", 1)]
    assert import_cycles(loop, {"a", "b", "c", "d"}) == [["a", "b", "c", "a"]]
    assert import_cycles(loop[:2], {"a", "b", "c"}) == []


def test_a_chain_through_an_allowed_module_is_followed() -> None:
    """core -> assets -> airflow.sdk: no single import is forbidden, the chain is (and parent packages count)."""
    core, assets, pkg = f"{PACKAGE}.core.storage", f"{PACKAGE}.assets", f"{PACKAGE}.core.delta"
    chain = [Import(core, assets, 1), Import(assets, "airflow.sdk", 3, "Asset")]
    assert forbidden_reaches(chain, {core, assets}) == [f"{core} -> {assets} -> airflow"]
    via_parent = [Import(f"{pkg}.log", f"{pkg}.x", 1), Import(pkg, "pyspark.sql", 1)]
    assert forbidden_reaches(via_parent, {f"{pkg}.log", f"{pkg}.x", pkg}) == [
        f"{pkg} -> pyspark", f"{pkg}.log -> {pkg} -> pyspark", f"{pkg}.x -> {pkg} -> pyspark"]
    compat, iceberg = f"{PACKAGE}.core.compat.rules", f"{PACKAGE}.core.iceberg.convert"
    across = [Import(compat, f"{PACKAGE}.core.delta.y", 1), Import(f"{PACKAGE}.core.delta.y", iceberg, 2)]
    assert forbidden_reaches(across, {compat, iceberg, f"{PACKAGE}.core.delta.y"}) == [
        f"{compat} -> {PACKAGE}.core.delta.y -> {PACKAGE}.core.iceberg"]
