"""The demo: write a small Delta table with deltalake, then inspect it with `deltaberg inspect`."""

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


def inspect(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "deltaberg"), "inspect", str(TABLE), *args]
    print("$", " ".join(["deltaberg", "inspect", str(TABLE.relative_to(ROOT)), *args]))
    subprocess.run(command, check=True)
    print()


def main() -> None:
    write_table()
    inspect()
    inspect("--version", "0")


if __name__ == "__main__":
    main()
