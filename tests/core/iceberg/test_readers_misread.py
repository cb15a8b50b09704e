"""Files and columns Iceberg readers misread (issue 26 §6): what `convert` says or refuses about them.

- A type widening Iceberg cannot apply is refused naming the Iceberg format version in force.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.delta_log import append_commit, commit_file, read_actions

from airflow_deltaberg.core.errors import UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import convert


def _widened_table(path: Path) -> None:
    """id long -> double by delta.typeChanges: the files written before hold int64, which no Iceberg version
    promotes to double."""
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    meta = next(a["metaData"] for a in read_actions(commit_file(path, 0)) if "metaData" in a)
    schema = json.loads(meta["schemaString"])
    schema["fields"][0]["type"] = "double"
    schema["fields"][0]["metadata"] = {"delta.typeChanges": [{"fromType": "long", "toType": "double"}]}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                "writerFeatures": ["typeWidening"]}
    append_commit(path, [{"protocol": protocol},
                         {"metaData": {**meta, "schemaString": json.dumps(schema),
                                       "configuration": {"delta.enableTypeWidening": "true"}}}])


@pytest.mark.parametrize("format_version", [2, 3])
def test_type_widening_refusal_names_the_format_version_in_force(format_version: int, tmp_path: Path) -> None:
    path = tmp_path / "t"
    _widened_table(path)
    with pytest.raises(UnsupportedTypeError) as caught:
        convert(str(path), format_version=format_version)
    message = str(caught.value)
    assert f"Iceberg v{format_version} readers cannot apply" in message
    assert "widened from long to double" in message
    assert str(path) in message
    assert not (path / "_iceberg" / "metadata").exists() or not any((path / "_iceberg" / "metadata").iterdir())
