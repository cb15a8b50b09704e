"""The Airflow names that moved between the supported versions come only through version_compat.

airflow_deltaberg/version_compat.py says so in its docstring; this walks the imports of every module of the
package (ast, tests/support/imports.py) and fails on a module other than version_compat that takes one of those
names from Airflow, or imports one of the modules they moved between.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.imports import PACKAGE, PACKAGE_DIR, Import, all_imports, imports_of

COMPAT = f"{PACKAGE}.version_compat"

#: The modules the names moved between (3.1 -> 3.3): nothing but version_compat imports from them.
MOVED_MODULES = ("airflow.exceptions", "airflow.sdk.exceptions", "airflow.configuration", "airflow.sdk.log")


def moved_names() -> set[str]:
    """version_compat's ``__all__``, read from its source."""
    tree = ast.parse((PACKAGE_DIR / "version_compat.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("version_compat has no __all__")


def direct_imports(imports: list[Import], names: set[str]) -> list[str]:
    """Imports of a moved name or module from Airflow by a module other than version_compat."""
    found = []
    for imp in imports:
        if imp.importer == COMPAT or not (imp.target == "airflow" or imp.target.startswith("airflow.")):
            continue
        full = f"{imp.target}.{imp.name}" if imp.name else imp.target
        if imp.name in names or any(full == m or full.startswith(m + ".") or imp.target == m for m in MOVED_MODULES):
            found.append(str(imp))
    return found


def test_version_compat_exports_the_moved_names() -> None:
    assert {"AirflowException", "AirflowFailException", "AirflowSkipException", "conf", "mask_secret"} <= moved_names()


def test_no_module_imports_a_moved_airflow_name_directly() -> None:
    violations = direct_imports(all_imports(), moved_names())
    assert not violations, "import these through airflow_deltaberg.version_compat:\n" + "\n".join(violations)


def test_the_check_sees_every_spelling(tmp_path: Path) -> None:
    """A name from any Airflow module, a moved module imported whole or through its parent package."""
    source = tmp_path / "sample.py"
    source.write_text(
        "from airflow.sdk import conf, BaseHook\n"
        "import airflow.exceptions\n"
        "from airflow import configuration\n"
        "def lazy():\n"
        "    from airflow.sdk.exceptions import ParamValidationError\n",
        encoding="utf-8",
    )
    found = direct_imports(imports_of(f"{PACKAGE}.hooks.sample", source, ()), moved_names())
    assert [line.split(" -> ")[1] for line in found] == [
        "airflow.sdk (conf) (line 1)",
        "airflow.exceptions (line 2)",
        "airflow (configuration) (line 3)",
        "airflow.sdk.exceptions (ParamValidationError) (line 5)",
    ]
    assert direct_imports(imports_of(COMPAT, source, ()), moved_names()) == []
