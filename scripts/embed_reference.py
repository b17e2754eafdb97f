"""Convert the published AuthEval reference files (../shared/reference) into the compact Parquet
copies shipped in autheval/data/reference, with a manifest of origins and SHA-256 digests.

Maintainer script: run it when the reference data changes; the package never reads ../shared.
Floats are parsed with DuckDB's exact (round-trip) parser, so every value keeps its bits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autheval.io import file_sha256
from autheval.reference_data import DATA_DIR, FILES
from warehouse.atomic import atomic_path, atomic_write_text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args()
    con = duckdb.connect()
    manifest = {}
    for name, relative in FILES.items():
        source = args.shared / "reference" / relative
        target = DATA_DIR / f"{name}.parquet"
        with atomic_path(target) as tmp:
            con.read_csv(str(source), header=True).write_parquet(str(tmp), compression="zstd")
        rows = pq.read_metadata(target).num_rows
        manifest[name] = {
            "file": target.name,
            "source": f"shared/reference/{relative}",
            "source_sha256": file_sha256(source),
            "parquet_sha256": file_sha256(target),
            "rows": rows,
        }
        print(f"{name}: {rows} rows -> {target.name} ({target.stat().st_size} bytes)")
    atomic_write_text(DATA_DIR / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
