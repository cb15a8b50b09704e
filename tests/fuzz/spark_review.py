"""Delta on Spark as a second oracle for the cases deltalake cannot judge: reads each kept table of a fuzz run whose
conversion succeeded and compares its rows with pyiceberg's rows of the converted table.

    .venv/bin/python tests/fuzz/run_fuzz.py --seed 1 --index 42,840 --keep --json /tmp/run.json
    .venv/bin/python tests/fuzz/spark_review.py /tmp/run.json [--only unverified-success]

Prints one line per case: ``same`` (Delta on Spark reads the rows our Iceberg table returns), ``differs`` (with a
row of each side), ``spark-refuses`` (the Java exception chain, shortened) or ``iceberg-unreadable``. A review
tool, not a test: it needs the jars of scripts/fetch_jars.sh and starts one local Spark session.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]  # tests/ (support), the repository

from pyiceberg.table import StaticTable  # noqa: E402
from support.oracle import normalized_rows  # noqa: E402
from support.spark_session import spark_session  # noqa: E402


def java_error(exc: BaseException) -> str:
    """The first lines of a py4j error's Java exception chain, else the Python message."""
    error = getattr(exc, "java_exception", None)
    parts = []
    while error is not None and len(parts) < 4:
        parts.append(str(error.toString())[:200])
        error = error.getCause()
    return " <- ".join(parts) if parts else str(exc).split("\n")[0][:300]


def review(spark: Any, table: Path) -> str:
    """The verdict for one kept table (its log mutated, its ``_iceberg`` written by the conversion)."""
    for checksum in table.rglob(".*.crc"):  # Hadoop's checksums of the unmutated files would fail every read
        checksum.unlink()
    metadata = sorted((table / "_iceberg" / "metadata").glob("*.metadata.json"))
    try:
        iceberg = StaticTable.from_metadata(str(metadata[-1])).scan().to_arrow()
    except Exception as exc:  # noqa: BLE001 - any failure is the verdict
        return f"iceberg-unreadable {type(exc).__name__}: {str(exc)[:200]}"
    try:
        delta = spark.read.format("delta").load(str(table)).toArrow()
    except Exception as exc:  # noqa: BLE001 - any refusal is the verdict
        return f"spark-refuses {java_error(exc)}"
    columns = sorted(set(delta.column_names) | set(iceberg.column_names))
    if set(delta.column_names) != set(iceberg.column_names):
        return f"differs: columns {sorted(delta.column_names)} (Delta on Spark) and {sorted(iceberg.column_names)}"
    ours, theirs = normalized_rows(iceberg, columns), normalized_rows(delta, columns)
    if ours == theirs:
        return "same"
    only_delta = sorted(set(map(repr, theirs)) - set(map(repr, ours)))[:1]
    only_iceberg = sorted(set(map(repr, ours)) - set(map(repr, theirs)))[:1]
    return f"differs: Delta on Spark only {only_delta}, Iceberg only {only_iceberg}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a run_fuzz.py --keep --json file")
    parser.add_argument("--only", default=None, help="only cases with a finding of this kind")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())["results"]
    chosen = [r for r in results if r.get("kept_at") and r["outcomes"].get("convert") == "exit 0"
              and (args.only is None or any(f["kind"] == args.only for f in r["findings"]))]
    session = spark_session()
    spark = next(session)
    try:
        for result in chosen:
            plan = result["plan"]
            verdict = review(spark, Path(result["kept_at"]))
            print(f"{plan['index']} {plan['fixture']} {plan['mutation']}: {verdict}", flush=True)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
