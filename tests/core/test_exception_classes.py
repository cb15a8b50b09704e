"""Every exception class of airflow_deltaberg is defined in core/errors.py: a walk over the package's source
(parsed, not imported: no Spark or Airflow needed) that names any class defined elsewhere."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import airflow_deltaberg

PACKAGE = Path(airflow_deltaberg.__file__).parent
ERRORS_MODULE = "airflow_deltaberg.core.errors"

def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def exception_classes() -> dict[str, str]:
    """Every class of the package that derives from an exception, as ``module.Class`` -> its module. A base
    counts as an exception when it is a builtin one, is named like one (``...Error``, ``...Exception``), or is
    itself such a class of the package; classes nested in functions count too."""
    classes: list[tuple[str, str, list[str]]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                classes.append((module, node.name, _base_names(node)))
    exceptions: set[str] = set()
    changed = True
    while changed:
        changed = False
        for _module, name, bases in classes:
            if name not in exceptions and any(
                _builtin_exception(b) or b.endswith(("Error", "Exception")) or b in exceptions for b in bases
            ):
                exceptions.add(name)
                changed = True
    return {f"{module}.{name}": module for module, name, bases in classes if name in exceptions}


def test_the_walk_finds_the_core_errors() -> None:
    found = exception_classes()
    assert found[f"{ERRORS_MODULE}.DeltabergError"] == ERRORS_MODULE
    assert found[f"{ERRORS_MODULE}.StatsParseError"] == ERRORS_MODULE  # a ValueError too


def test_every_exception_class_lives_in_core_errors() -> None:
    outside = sorted(name for name, module in exception_classes().items() if module != ERRORS_MODULE)
    assert outside == [], f"exception classes defined outside core/errors.py: {', '.join(outside)}"



def test_every_exception_class_derives_from_deltaberg_error() -> None:
    """One hierarchy: ``except DeltabergError`` catches every error the package raises. With the walk above
    (every exception class is in core/errors.py), checking that module's classes covers the package."""
    from airflow_deltaberg.core import errors

    defined = [cls for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ == ERRORS_MODULE]
    outside = sorted(cls.__name__ for cls in defined if not issubclass(cls, errors.DeltabergError))
    assert len(defined) > 30
    assert outside == [], f"exception classes that escape `except DeltabergError`: {', '.join(outside)}"
