"""Sites benchmark (issue 29): export time per site and pooling time at the hub, in one run.

N sites, each with a synthetic log of M records (sql/records/synthetic_log.sql, 10 records per cluster,
a different stretch of case numbers per site) written to Parquet (not timed). Each site: read and
validate its records (timed apart), then `autheval.sites.export.write_export` (sufficient statistics, B
poisson_by_site replicate sums, signed); then the hub: verify every export against the registered keys
and pool them (`autheval.sites.pool`). Printed with the machine line (cores, available memory, load
average) and the peak resident memory of this process.

Usage: python benchmarks/sites.py [--sites 3] [--records 100000] [--replicates 1000]
       (the issue's figure: --sites 10 --records 1000000; `make bench` runs it; figures: docs/sites.md)
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peer import machine_line


def _log(folder: Path, first_case: int, cases: int) -> Path:
    import duckdb
    import pyarrow.parquet as pq

    from warehouse.sql import load_sql

    path = folder / "log.parquet"
    con = duckdb.connect()
    reader = con.execute(
        load_sql("records/synthetic_log"),
        {"first_case": first_case, "n_cases": cases, "n_clusters": max(cases // 10, 1)},
    ).arrow()
    pq.write_table(reader.read_all() if hasattr(reader, "read_all") else reader, path)
    con.close()
    return path


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000, help="records per site")
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument(
        "--secret-seed",
        action="store_true",
        help="each site's own secret seed (poisson_by_site_secret), not the hub's",
    )
    args = parser.parse_args()

    from autheval.records.read import read_records
    from autheval.sites.export import write_export
    from autheval.sites.pool import check_exports, pool, read_export
    from autheval.sites.signing import keygen, load_private_key, trusted_keys

    root = Path(tempfile.mkdtemp(prefix="autheval-sites-bench-"))
    try:
        trust = root / "trust"
        trust.mkdir()
        exports, reads, times = [], [], []
        for i in range(args.sites):
            site = f"site-{i}"
            folder = root / site
            folder.mkdir()
            log = _log(folder, i * args.records, args.records)
            key_file, pub = keygen(root / f"key-{site}")
            shutil.copy(pub, trust / f"{site}.pub")
            started = time.perf_counter()
            records = read_records(str(log))
            reads.append(time.perf_counter() - started)
            started = time.perf_counter()
            write_export(
                records,
                root / f"export-{site}",
                site,
                None if args.secret_seed else 20260711,
                args.replicates,
                5,
                5,
                load_private_key(key_file),
            )
            times.append(time.perf_counter() - started)
            exports.append(root / f"export-{site}")
        print(machine_line())
        print(
            f"per site ({args.records:,} records, {args.records // 10:,} clusters, {args.replicates:,} replicates, "
            f"{'a secret seed' if args.secret_seed else 'the hub seed'}): "
            f"read and validate median {_median(reads):.2f} s (max {max(reads):.2f} s); export median "
            f"{_median(times):.2f} s (max {max(times):.2f} s)"
        )
        started = time.perf_counter()
        trusted = trusted_keys(trust)
        read = [read_export(e, trusted) for e in exports]
        check_exports(read)
        rows, _, _ = pool(read)
        seconds = time.perf_counter() - started
        print(machine_line())
        size = sum(f.stat().st_size for e in exports for f in e.iterdir())
        print(
            f"pool at the hub ({args.sites} sites, {size / 1e6:.1f} MB of exports, {len(rows)} rows): {seconds:.2f} s; "
            f"peak memory of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
