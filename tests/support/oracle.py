"""Row oracles: what deltalake's readers return from a Delta table, what pyiceberg returns from the converted one,
and the comparison of the two (normalized as tests/core/iceberg/test_convert_oracle.py's docstring lists).

Delta's side is deltalake's kernel-based reader (``QueryBuilder``, which implements deletion vectors and column
mapping), or for ``delta_arrow`` its pyarrow reader where that reader accepts the table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
from deltalake import QueryBuilder
from pyiceberg.catalog.sql import SqlCatalog

Rows = list[tuple[Any, ...]]


def rows_of(table: pa.Table) -> Rows:
    """The rows as tuples over the columns in name order, sorted (for tables of plain columns)."""
    return sorted(tuple(row[c] for c in sorted(table.column_names)) for row in table.to_pylist())


def kernel_arrow(path: Path | str | deltalake.DeltaTable, version: int | None = None) -> pa.Table:
    """The table as deltalake's kernel-based reader (DataFusion) returns it (at the version a DeltaTable given is
    loaded at)."""
    table = path if isinstance(path, deltalake.DeltaTable) else deltalake.DeltaTable(str(path), version=version)
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t"))


def delta_rows(path: Path | str, version: int | None = None) -> Rows:
    """``rows_of`` the table as deltalake's kernel-based reader returns it."""
    return rows_of(kernel_arrow(path, version))


def normal_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", "UTC" if t.tz else None)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return normal_type(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(normal_type(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(normal_type(t.key_type), normal_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normal_type(f.type)) for f in t])
    return t


def _normal_value(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return "<NaN>"
    if isinstance(v, dict):
        return tuple((k, _normal_value(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_normal_value(x) for x in v)
    return v


def normalized_rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows of ``table`` over ``columns``, normalized as the module docstring lists, sorted."""
    table = table.select(columns)
    target = pa.schema([pa.field(f.name, normal_type(f.type)) for f in table.schema])
    table = table.cast(target, safe=False)  # safe=False: ns -> us truncates instead of raising
    rows = [tuple(_normal_value(row[c]) for c in columns) for row in table.to_pylist()]
    return sorted(rows, key=repr)


def delta_arrow(path: Path | str, version: int | None = None) -> tuple[pa.Table, str]:
    """The table as deltalake reads it, and which deltalake reader was used."""
    table = deltalake.DeltaTable(str(path), version=version)
    if table.metadata().configuration.get("delta.columnMapping.mode", "none") == "none":
        try:
            return table.to_pyarrow_table(), "pyarrow"
        except Exception:  # noqa: BLE001 - any refusal of the pyarrow reader falls back to DataFusion
            pass
    reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return pa.table(reader), "datafusion"


def assert_same_rows(iceberg: pa.Table, delta: pa.Table, what: str = "") -> None:
    columns = delta.column_names
    assert sorted(iceberg.column_names) == sorted(columns), what
    assert iceberg.num_rows == delta.num_rows, what
    assert normalized_rows(iceberg, columns) == normalized_rows(delta, columns), what


# -- a SQLite catalog -------------------------------------------------------------------------------------------


def sql_catalog_config(tmp_path: Path) -> dict[str, str]:
    """pyiceberg's SqlCatalog on a SQLite file in ``tmp_path``, with a warehouse next to it."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}


def open_sql_catalog(tmp_path: Path, name: str = "deltaberg") -> SqlCatalog:
    config = sql_catalog_config(tmp_path)
    return SqlCatalog(name, uri=config["uri"], warehouse=config["warehouse"])
