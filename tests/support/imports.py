"""The package's imports read from its source (ast, nothing imported): the walker of tests/test_layers.py and
tests/test_version_compat.py.

Every import statement counts, at module level or inside a function (a lazy import still ties the two modules
together), relative ones resolved; ``from pkg import sub`` resolves to the submodule where ``pkg.sub`` is one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "airflow_deltaberg"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    name: str | None = None  # the name a ``from target import name`` takes (None for ``import target``)

    def __str__(self) -> str:
        taken = f" ({self.name})" if self.name else ""
        return f"{self.importer} -> {self.target}{taken} (line {self.line})"


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: Path, modules: Iterable[str]) -> list[Import]:
    """Every import in the module, resolved to the module it loads (a submodule where ``from pkg import sub``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    known = set(modules)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_relative(name, is_package, node.level, node.module) if node.level else (node.module or "")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    found.append(Import(name, submodule, node.lineno))
                else:
                    found.append(Import(name, source, node.lineno, alias.name))
    return found


def all_imports(root: Path = PACKAGE_DIR) -> list[Import]:
    """Every import of the package, one per importing module, target, name and line."""
    modules = package_modules(root)
    found = [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]
    return list(dict.fromkeys(found))


def parents(module: str) -> list[str]:
    """The packages Python imports before ``module`` (``a.b.c``: ``a``, ``a.b``)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    """Each importing module with what importing it loads: the targets and their parent packages (importing a
    module runs its parent packages first)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.importer, set()).update([*parents(imp.target), imp.target])
    return graph


def reachable(start: str, graph: dict[str, set[str]], modules: Iterable[str]) -> dict[str, list[str]]:
    """Every module importing ``start`` loads, ours and others (a target outside ``modules`` is a leaf), each with
    a shortest chain of imports that loads it from ``start``; the parent packages of ``start`` are followed too."""
    known = set(modules)
    chains: dict[str, list[str]] = {start: [start]}
    frontier = [start, *(p for p in parents(start) if p in known)]
    for parent in frontier[1:]:
        chains[parent] = [start, parent]
    while frontier:
        following = []
        for node in frontier:
            if node not in known:
                continue
            for nxt in sorted(graph.get(node, ())):
                if nxt not in chains:
                    chains[nxt] = [*chains[node], nxt]
                    following.append(nxt)
        frontier = following
    return chains
