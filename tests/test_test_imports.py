"""No module under tests imports a test module: what two test modules share lives in tests/support (a renamed
helper in a test module once broke another module's import). Every import statement counts, at module level or
inside a function (ast, tests/support/imports.py), relative ones resolved."""

from __future__ import annotations

from pathlib import Path

from support.imports import Import, imports_of, package_modules

TESTS = Path(__file__).resolve().parent


def imports_of_test_modules(root: Path = TESTS) -> list[Import]:
    """The imports of every module under ``root`` that load a ``test_*`` module or take a ``test_*`` name."""
    modules = package_modules(root)
    found = []
    for name, path in modules.items():
        for imp in imports_of(name, path, modules):
            taken = [*imp.target.split("."), imp.name or ""]
            if any(part.startswith("test_") for part in taken):
                found.append(imp)
    return found


def test_no_module_imports_a_test_module() -> None:
    violations = imports_of_test_modules()
    assert not violations, "move what these share into tests/support:\n" + "\n".join(map(str, violations))
