"""The demo: write a small Delta table with deltalake, inspect and validate it, convert it to Iceberg
(SQLite catalog), append to it, convert again, and read the Iceberg table back with pyiceberg."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = ROOT / ".demo"
TABLE = DEMO_DIR / "sales"


def write_table() -> None:
    shutil.rmtree(TABLE, ignore_errors=True)
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    for day, amounts in (("2026-11-23", [10, 20]), ("2026-11-24", [30]), ("2026-11-25", [40, 50, 60])):
        batch = pa.table(
            {
                "day": pa.array([day] * len(amounts)),
                "order_id": pa.array(range(len(amounts)), pa.int64()),
                "amount": pa.array(amounts, pa.float64()),
            }
        )
        write_deltalake(str(TABLE), batch, mode="append", partition_by=["day"])
    table = DeltaTable(str(TABLE))
    table.delete("amount < 15")
    table.create_checkpoint()
    print(f"wrote {TABLE} with deltalake: version {table.version()}, {len(table.file_uris())} live files\n")


CATALOG_URI = f"sqlite:///{DEMO_DIR / 'catalog.db'}"


def deltaberg(command: str, *args: str, ok_codes: tuple[int, ...] = (0,)) -> None:
    argv = [str(Path(sys.executable).parent / "deltaberg"), command, str(TABLE), *args]
    shown = " ".join(["deltaberg", command, str(TABLE.relative_to(ROOT)), *args]).replace(str(ROOT) + "/", "")
    print("$", shown)
    result = subprocess.run(argv)
    if result.returncode not in ok_codes:
        raise SystemExit(result.returncode)
    print()


def iceberg_rows() -> int:
    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("deltaberg", uri=CATALOG_URI).load_table("demo.sales")
    rows = table.scan().to_arrow()
    print(f"pyiceberg reads demo.sales: {rows.num_rows} rows, {len(table.metadata.snapshots)} snapshots\n")
    return rows.num_rows


def main() -> None:
    (DEMO_DIR / "catalog.db").unlink(missing_ok=True)
    write_table()
    deltaberg("inspect")
    deltaberg("inspect", "--version", "0")
    # A plain deltalake table is not IcebergWriterCompatV1: validate explains why (exit code 1).
    deltaberg("validate", ok_codes=(0, 1))
    deltaberg("convert", "--identifier", "demo.sales", "--catalog-uri", CATALOG_URI)
    before = iceberg_rows()
    more = pa.table({"day": ["2026-11-26"] * 2, "order_id": pa.array([0, 1], pa.int64()),
                     "amount": pa.array([70.0, 80.0], pa.float64())})
    write_deltalake(str(TABLE), more, mode="append", partition_by=["day"])
    print("appended 2 rows with deltalake\n")
    deltaberg("convert", "--identifier", "demo.sales", "--catalog-uri", CATALOG_URI)
    after = iceberg_rows()
    delta_rows = DeltaTable(str(TABLE)).to_pyarrow_table().num_rows
    assert after == before + 2 == delta_rows, (before, after, delta_rows)
    print(f"Delta and Iceberg agree: {delta_rows} rows")


if __name__ == "__main__":
    main()
