"""Deletion vector decoding: the numpy decoder core/delta/roaring.py had up to commit ba6f684 (read from git)
against pyroaring (CRoaring; the module's decoder since), the same bytes to the same ascending uint64 numpy array.

Decodes every deletion vector of the Delta fixture tables (files ``deletion_vector_*.bin``, each DV at the
offsets the log's descriptors give), then one DV of ``--positions`` deleted rows in three shapes (every other
row: array containers; random rows of a 10x larger file: bitmap containers; one long range: run containers).
Prints the best of ``--repeat`` rounds for each and the ratio.

    python benchmarks/bench_roaring.py --positions 1000000   (from the repository root, in a git checkout)
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pyroaring import BitMap64

from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import relative_dv_key
from airflow_deltaberg.core.delta.deletion_vectors.roaring import PORTABLE_MAGIC, decode_roaring_bitmap_array
from airflow_deltaberg.core.delta.deletion_vectors.z85 import z85_decode

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "delta"


#: The last commit with the numpy decoder.
NUMPY_COMMIT = "ba6f684"
REPO = Path(__file__).resolve().parents[1]


def numpy_decoder(commit: str) -> Callable[[bytes], np.ndarray]:
    """The numpy decoder of ``commit``'s core/delta/roaring.py, loaded from git."""
    source = subprocess.run(["git", "show", f"{commit}:airflow_deltaberg/core/delta/roaring.py"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("roaring_numpy")
    exec(compile(source, "roaring_numpy.py", "exec"), module.__dict__)  # noqa: S102 - our own file from git
    return module.decode_roaring_bitmap_array


def fixture_dvs(root: Path) -> list[bytes]:
    """The bytes of every DV the fixture logs name: on disk (the size prefix and checksum left out) and inline."""
    blobs = []
    for log in sorted(root.glob("*/_delta_log/0*.json")):
        for line in log.read_text(errors="replace").splitlines():
            try:
                dv = (json.loads(line).get("add") or {}).get("deletionVector")
            except json.JSONDecodeError:
                continue
            if not dv:
                continue
            if dv["storageType"] == "i":
                blobs.append(z85_decode(dv["pathOrInlineDv"])[:dv["sizeInBytes"]])
            elif dv["storageType"] == "u":
                data = (log.parents[1] / relative_dv_key(dv["pathOrInlineDv"])).read_bytes()
                offset = dv.get("offset") or 1
                blobs.append(data[offset + 4:offset + 4 + dv["sizeInBytes"]])
    return blobs


def shapes(positions: int) -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    made = {
        "every other row": np.arange(0, 2 * positions, 2, dtype=np.uint64),
        "random rows of 10x": np.unique(rng.integers(0, 10 * positions, positions, dtype=np.uint64)),
        "one range": np.arange(positions, dtype=np.uint64),
    }
    out = {}
    for name, values in made.items():
        bitmap = BitMap64(values.tolist())
        bitmap.run_optimize()
        out[f"{name} ({len(values):,})"] = struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize()
    return out


def best(decode: Callable[[bytes], np.ndarray], blobs: list[bytes], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for blob in blobs:
            decode(blob)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--numpy-commit", default=NUMPY_COMMIT)
    args = parser.parse_args()

    numpy_decode = numpy_decoder(args.numpy_commit)
    cases = {}
    dvs = fixture_dvs(args.fixtures)
    cases[f"fixture DVs ({len(dvs)}, {sum(map(len, dvs))} bytes)"] = dvs
    cases.update({name: [blob] for name, blob in shapes(args.positions).items()})
    print(f"{'case':42} {'numpy':>12} {'pyroaring':>12} {'numpy/pyroaring':>16}")
    for name, blobs in cases.items():
        for blob in blobs:
            assert numpy_decode(blob).tolist() == decode_roaring_bitmap_array(blob).tolist()
        numpy_s = best(numpy_decode, blobs, args.repeat)
        pyroaring_s = best(decode_roaring_bitmap_array, blobs, args.repeat)
        print(f"{name:42} {numpy_s * 1e3:9.3f} ms {pyroaring_s * 1e3:9.3f} ms {numpy_s / pyroaring_s:15.1f}x")

if __name__ == "__main__":
    main()
