"""Estimator benchmark: the SQL estimators against a straightforward numpy per-replicate loop, in one run.

1. All six reference traces (5000 replicates each, AuthEval's reference scheme) plus the paired
   contrast: numpy loop vs `autheval.estimators.estimate`, both from the files; outputs compared.
2. Scale: 10M records in 1M clusters with the `poisson` scheme and 1000 replicates (time, peak memory),
   run in a child process so its peak memory is its own.
3. The `reference` scheme at 1M clusters, replicates streamed in blocks (time, peak memory).

Usage: python benchmarks/estimators.py [--cases 10000000] [--clusters 1000000] [--poisson-reps 1000]
                                        [--reference-reps 200] [--skip-scale]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autheval.estimators import estimate  # noqa: E402
from autheval.records import read_records  # noqa: E402
from autheval.reference_data import FILES, REFERENCE_ANALYSES, reference_path  # noqa: E402
from benchmarks.numpy_loop import load_trace, paired_contrast, reference_summary  # noqa: E402

SHARED = ROOT.parent / "shared" / "reference"
TRACES = {analysis: table for analysis, _, _, _, table in REFERENCE_ANALYSES}


def trace_file(table: str) -> Path:
    """The published CSV when ../shared is there, else the package's Parquet copy."""
    shared = SHARED / FILES[table]
    return shared if shared.exists() else reference_path(table)


def best_of(runs: int, fn):
    """(best wall time, last result) over `runs` calls."""
    best, result = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def reference_traces(runs: int = 3) -> None:
    paths = {name: trace_file(table) for name, table in TRACES.items()}
    contrast = [("CLIP probe", "LLaVA-Med head")]

    def numpy_loop(stats):
        loop = {name: reference_summary(s) for name, s in stats.items()}
        return loop, paired_contrast(stats["CLIP probe"], stats["LLaVA-Med head"])

    t_load, stats = best_of(runs, lambda: {name: load_trace(path) for name, path in paths.items()})
    t_loop, (loop, loop_contrast) = best_of(runs, lambda: numpy_loop(stats))
    t_read, records = best_of(runs, lambda: [read_records(path, analysis=name) for name, path in paths.items()])
    t_sql, result = best_of(runs, lambda: estimate(records, scheme="reference", reps=5000, contrasts=contrast))

    worst = 0.0
    for name, expected in loop.items():
        for metric in ("J_auth", "J", "intervention_rate", "delta", "Delta_authority"):
            row = result.estimate(name, "image_weighted", metric)
            for ours, key in ((row["estimate"], metric), (row["ci_lower"], f"{metric}_ci_lower"), (row["ci_upper"], f"{metric}_ci_upper")):
                worst = max(worst, abs(ours - expected[key]))
        row = result.estimate(name, "cluster_equal", "Delta_authority")
        worst = max(worst, abs(row["estimate"] - expected["Delta_authority_cluster"]),
                    abs(row["ci_lower"] - expected["Delta_authority_cluster_ci_lower"]),
                    abs(row["ci_upper"] - expected["Delta_authority_cluster_ci_upper"]))
    for c in result.contrasts:
        lo, hi = loop_contrast[f"{c['unit']}_ci"]
        worst = max(worst, abs(c["difference"] - loop_contrast[c["unit"]]), abs(c["ci_lower"] - lo), abs(c["ci_upper"] - hi))
    print(f"== six reference traces + paired contrast, 5000 replicates, reference scheme (best of {runs})")
    print("                       load files     estimate        total")
    print(f"numpy per-replicate loop  {t_load:8.3f} s   {t_loop:8.3f} s   {t_load + t_loop:8.3f} s")
    print(f"SQL estimators            {t_read:8.3f} s   {t_sql:8.3f} s   {t_read + t_sql:8.3f} s"
          "   (files validated; 8 metrics x 2 units per trace)")
    print(f"speed-up: estimate {t_loop / t_sql:.2f} x, total {(t_load + t_loop) / (t_read + t_sql):.2f} x")
    print(f"max |difference| over every published cell: {worst:.3e} ({'identical to 1e-12' if worst <= 1e-12 else 'MISMATCH'})")


def scale_child(args) -> None:
    """Run in a child: read the Parquet log, estimate, print JSON with times and peak memory."""
    t0 = time.perf_counter()
    records = read_records(args.log, analysis="scale")
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = estimate([records], scheme=args.scheme, reps=args.reps)
    t_est = time.perf_counter() - t0
    gap = result.estimate("scale", "image_weighted", "Delta_authority")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"read_validate_s": t_read, "estimate_s": t_est, "peak_mb": peak_mb,
                      "n_cases": records.n_cases, "n_clusters": records.n_clusters,
                      "Delta": gap["estimate"], "ci": [gap["ci_lower"], gap["ci_upper"]]}))


def scale_runs(cases: int, clusters: int, poisson_reps: int, reference_reps: int) -> None:
    import duckdb

    from warehouse.sql import load_sql

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.parquet"
        t0 = time.perf_counter()
        con = duckdb.connect()
        table = con.execute(load_sql("synthetic_log"), {"n_cases": cases, "n_clusters": clusters}).arrow().read_all()
        pq.write_table(table, log)
        del table
        con.close()
        print(f"\n(generated {cases:,} records in {clusters:,} clusters in {time.perf_counter() - t0:.1f} s)")
        for scheme, reps in (("poisson", poisson_reps), ("reference", reference_reps)):
            out = subprocess.run([sys.executable, __file__, "--child", str(log), "--scheme", scheme, "--reps", str(reps)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"== {scheme} scheme, {r['n_cases']:,} records, {r['n_clusters']:,} clusters, {reps} replicates")
            print(f"read + validate : {r['read_validate_s']:7.2f} s")
            print(f"estimate        : {r['estimate_s']:7.2f} s  (both units, every metric, intervals, identity check)")
            print(f"peak memory     : {r['peak_mb']:7.0f} MB (whole child process)")
            print(f"Delta (image)   : {r['Delta']:.6f} [{r['ci'][0]:.6f}, {r['ci'][1]:.6f}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000_000)
    parser.add_argument("--clusters", type=int, default=1_000_000)
    parser.add_argument("--poisson-reps", type=int, default=1000)
    parser.add_argument("--reference-reps", type=int, default=200)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scheme", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.log = args.child
        scale_child(args)
        return 0
    reference_traces()
    if not args.skip_scale:
        scale_runs(args.cases, args.clusters, args.poisson_reps, args.reference_reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
