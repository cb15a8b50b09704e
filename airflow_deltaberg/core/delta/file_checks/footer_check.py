"""What in a Parquet footer pyarrow would abort the process on instead of raising.

pyarrow builds a column chunk's metadata (``FileMetaData.row_group(g).column(i)``, read for statistics) in C++ code
whose exceptions its bindings do not turn into Python ones: a footer whose size statistics do not fit the schema
(level histograms of another length than the column's levels, unencoded byte counts on a column that is not
BYTE_ARRAY: apache/arrow#45283), statistics whose min or max is shorter than a value of the column's fixed width,
a row group with another number of column chunks than the schema, a chunk whose physical type is not its schema
column's (fuzz seed 8 case 1927), or a chunk encrypted with a column key ends the process with ``terminate called
after throwing parquet::ParquetException``. Reading the data
raises an OSError for the same footer. ``footer_problem`` walks the footer's Thrift (compact protocol) before
anything asks pyarrow for a column chunk, so such a file is refused with a typed error naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

# Thrift compact protocol type codes.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
#: Parquet's Type enum (the physical types), as the Thrift footer spells them.
_PHYSICAL_TYPES = {"BOOLEAN": 0, "INT32": 1, "INT64": 2, "INT96": 3, "FLOAT": 4, "DOUBLE": 5, "BYTE_ARRAY": 6,
                   "FIXED_LEN_BYTE_ARRAY": 7}
_BYTE_ARRAY = _PHYSICAL_TYPES["BYTE_ARRAY"]
#: Bytes of one plain-encoded value of the fixed-width physical types (FIXED_LEN_BYTE_ARRAY: the column's length).
_VALUE_BYTES = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_STATISTICS_VALUES = {1: "max", 2: "min", 5: "max_value", 6: "min_value"}
_MAX_DEPTH = 64


class _Reader:
    """A cursor over Thrift compact protocol bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("the footer ends inside a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ValueError("a varint runs past 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip_bytes(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("a length runs past the footer")
        self.pos += n

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of each field of the struct at the cursor, up to its stop byte."""
        last = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == _STOP:
                return
            delta = header >> 4
            field_id = last + delta if delta else self.zigzag()
            last = field_id
            yield field_id, kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        if size == 15:
            size = self.varint()
        return size, header & 0x0F

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise ValueError("values nested too deep")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.skip_bytes(1)
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.skip_bytes(8)
        elif kind == _BINARY:
            self.skip_bytes(self.varint())
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                self.skip_element(element, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip_element(types >> 4, depth + 1)
                    self.skip_element(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            for _, field_kind in self.fields():
                self.skip(field_kind, depth + 1)
        else:
            raise ValueError(f"unknown Thrift type {kind}")

    def skip_element(self, kind: int, depth: int) -> None:
        # In lists, sets and maps booleans take a byte of their own.
        if kind in (_TRUE, _FALSE):
            self.skip_bytes(1)
        else:
            self.skip(kind, depth)


def footer_problem(metadata: pq.FileMetaData) -> str | None:
    """What in ``metadata`` would make pyarrow abort when a column chunk's metadata is asked for; None when
    nothing."""
    sink = pa.BufferOutputStream()
    metadata.write_metadata_file(sink)  # the footer re-encoded from pyarrow's parsed Thrift: no chunk built
    data = sink.getvalue().to_pybytes()
    footer_length = int.from_bytes(data[-8:-4], "little")
    schema = metadata.schema
    levels = [_Column(schema.column(i).max_repetition_level, schema.column(i).max_definition_level,
                      _value_bytes(schema.column(i)), _PHYSICAL_TYPES.get(schema.column(i).physical_type))
              for i in range(metadata.num_columns)]
    try:
        return _file_problem(_Reader(data[-8 - footer_length:-8]), levels)
    except ValueError as exc:  # the walk ran off the Thrift it expects
        return f"has a footer that cannot be walked: {exc}"


@dataclass(frozen=True)
class _Column:
    max_repetition: int
    max_definition: int
    value_bytes: int | None  # of one plain-encoded value; None: variable (BYTE_ARRAY)
    physical_type: int | None = None  # the schema's (Parquet's Type enum)


def _value_bytes(column: pq.ColumnSchema) -> int | None:
    if column.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return int(column.length)
    return _VALUE_BYTES.get(column.physical_type)


def _file_problem(reader: _Reader, levels: list[_Column]) -> str | None:
    for field_id, kind in reader.fields():
        if field_id == 4 and kind == _LIST:  # row_groups
            size, _ = reader.list_header()
            for g in range(size):
                problem = _row_group_problem(reader, g, levels)
                if problem is not None:
                    return problem
        else:
            reader.skip(kind)
    return None


def _row_group_problem(reader: _Reader, g: int, levels: list[_Column]) -> str | None:
    problem = None
    for field_id, kind in reader.fields():
        if field_id == 1 and kind == _LIST:  # columns
            size, _ = reader.list_header()
            if size != len(levels):
                problem = problem or f"has {size} column chunks in row group {g} for the schema's {len(levels)} columns"
            for i in range(size):
                found = _column_chunk_problem(reader, levels[i] if i < len(levels) else None)
                if found is not None:
                    problem = problem or f"has {found} (row group {g}, column {i})"
        else:
            reader.skip(kind)
    return problem


def _column_chunk_problem(reader: _Reader, level: _Column | None) -> str | None:
    problem = None
    for field_id, kind in reader.fields():
        if field_id == 8 and kind == _STRUCT:  # crypto_metadata
            problem = problem or "a column chunk encrypted with a key this reader does not have"
            reader.skip(kind)
        elif field_id == 3 and kind == _STRUCT:  # meta_data
            found = _column_metadata_problem(reader, level)
            problem = problem or found
        else:
            reader.skip(kind)
    return problem


def _column_metadata_problem(reader: _Reader, column: _Column | None) -> str | None:
    problem = None
    physical_type = None
    size_stats: tuple[int, int, bool] | None = None
    for field_id, kind in reader.fields():
        if field_id == 1 and kind == _I32:
            physical_type = reader.zigzag()
        elif field_id == 12 and kind == _STRUCT:  # statistics
            found = _statistics_problem(reader, column)
            problem = problem or found
        elif field_id == 16 and kind == _STRUCT:  # size_statistics
            size_stats = _size_statistics(reader)
        else:
            reader.skip(kind)
    if column is not None and physical_type is not None and physical_type != column.physical_type:
        names = {code: name for name, code in _PHYSICAL_TYPES.items()}
        problem = problem or (f"a column chunk of physical type {names.get(physical_type, physical_type)} where the "
                              f"schema's column is {names.get(column.physical_type, column.physical_type)}")
    if size_stats is not None and column is not None:
        repetition, definition, has_unencoded = size_stats
        for name, length, max_level in (("repetition", repetition, column.max_repetition),
                                        ("definition", definition, column.max_definition)):
            if length and length != max_level + 1:
                problem = problem or (f"size statistics with a {name} level histogram of {length} levels for a "
                                      f"column of {max_level + 1}")
        if has_unencoded and physical_type != _BYTE_ARRAY:
            problem = problem or "size statistics counting unencoded byte array bytes of a column that is not one"
    return problem


def _statistics_problem(reader: _Reader, column: _Column | None) -> str | None:
    problem = None
    for field_id, kind in reader.fields():
        if field_id in _STATISTICS_VALUES and kind == _BINARY:
            length = reader.varint()
            reader.skip_bytes(length)
            wanted = column.value_bytes if column is not None else None
            if wanted is not None and length < wanted:
                problem = problem or (f"statistics whose {_STATISTICS_VALUES[field_id]} has {length} bytes for "
                                      f"values of {wanted}")
        else:
            reader.skip(kind)
    return problem


def _size_statistics(reader: _Reader) -> tuple[int, int, bool]:
    """(repetition histogram length, definition histogram length, unencoded byte array bytes given)."""
    repetition = definition = 0
    has_unencoded = False
    for field_id, kind in reader.fields():
        if field_id == 1 and kind == _I64:
            reader.varint()
            has_unencoded = True
        elif field_id in (2, 3) and kind == _LIST:
            size, element = reader.list_header()
            for _ in range(size):
                reader.skip_element(element, 1)
            if field_id == 2:
                repetition = size
            else:
                definition = size
        else:
            reader.skip(kind)
    return repetition, definition, has_unencoded
