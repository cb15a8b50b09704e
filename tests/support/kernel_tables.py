"""Delta tables written by Delta Kernel through py4j (the ``kernel`` fixture): a table created with properties,
and rows appended by Kernel's own parquet writer and append actions, renamed to physical names by us (Kernel
4.4.0 does not write column-mapped tables itself: tests/spark/test_delta_parity.py's docstring, b))."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_deltaberg.core.delta import DeltaTable

KERNEL_ENGINE_INFO = "airflow-deltaberg-tests"


def kernel_create(kernel: Any, path: Path, properties: dict[str, str], *, extra: Any = None,
                  partition_columns: tuple[str, ...] = (), columns: Any = None) -> int:
    """Create a table with Delta Kernel: columns ``id long, name string`` (plus ``x`` of type ``extra``)."""
    k, t = kernel.api, kernel.types
    schema = columns or t.StructType().add("id", t.LongType.LONG).add("name", t.StringType.STRING)
    if extra is not None:
        schema = schema.add("x", extra)
    builder = (
        k.Table.forPath(kernel.engine, str(path))
        .createTransactionBuilder(kernel.engine, KERNEL_ENGINE_INFO, k.Operation.CREATE_TABLE)
        .withSchema(kernel.engine, schema)
        .withTableProperties(kernel.engine, kernel.java_map(properties))
    )
    if partition_columns:
        builder = builder.withPartitionColumns(kernel.engine, kernel.java_list(list(partition_columns)))
    txn = builder.build(kernel.engine)
    return txn.commit(kernel.engine, k.utils.CloseableIterable.emptyIterable()).getVersion()


def _to_physical(value: Any, type_: Any) -> Any:
    """A row value keyed by logical names -> keyed by physical names (structs only; map keys are data)."""
    from airflow_deltaberg.core.delta.schema import ArrayType, MapType, StructType

    if value is None:
        return None
    if isinstance(type_, StructType):
        return {f.physical_name: _to_physical(value.get(f.name), f.type) for f in type_.fields}
    if isinstance(type_, ArrayType):
        return [_to_physical(v, type_.element_type) for v in value]
    if isinstance(type_, MapType):
        return {key: _to_physical(v, type_.value_type) for key, v in value.items()}
    return value


def kernel_append(kernel: Any, path: Path, rows: list[dict[str, Any]], partition: dict[str, str]) -> int:
    """Append ``rows`` (logical names; one partition) through Kernel: see the module docstring."""
    k, engine, jvm = kernel.api, kernel.engine, kernel.jvm
    txn = (k.Table.forPath(engine, str(path))
           .createTransactionBuilder(engine, KERNEL_ENGINE_INFO, k.Operation.WRITE).build(engine))
    state = txn.getTransactionState(engine)
    logical = txn.getSchema(engine)
    id_mode = getattr(k.internal.util, "ColumnMapping$ColumnMappingMode").ID
    physical = k.internal.util.ColumnMapping.convertToPhysicalSchema(logical, logical, id_mode)
    ours = DeltaTable(str(path)).snapshot().schema
    lines = kernel.java_list([json.dumps(_to_physical(row, ours)) for row in rows])
    vector = k.internal.util.VectorUtils.buildColumnVector(lines, kernel.types.StringType.STRING)
    batch = engine.getJsonHandler().parseJson(vector, physical, jvm.java.util.Optional.empty())
    data = k.internal.util.Utils.singletonCloseableIterator(
        k.data.FilteredColumnarBatch(batch, jvm.java.util.Optional.empty()))
    values = kernel.java_map({name: k.expressions.Literal.ofString(v) for name, v in partition.items()})
    context = k.Transaction.getWriteContext(engine, state, values)
    files = engine.getParquetHandler().writeParquetFiles(context.getTargetDirectory(), data,
                                                         context.getStatisticsColumns())
    actions = k.Transaction.generateAppendActions(engine, state, files, context)
    return txn.commit(engine, k.utils.CloseableIterable.inMemoryIterable(actions)).getVersion()
