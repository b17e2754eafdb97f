"""Estimator benchmark (`make bench`): every figure measured against a baseline in the same run, each
command in a child process of its own (wall time from start to end, the child's own peak memory), each
figure printed with the machine line (cores, available memory, load average) taken just before it.

1. The issue's table (benchmarks/peer.py): the 4-row example, 100k cases in 10k clusters and 1M cases
   in 100k clusters, 5000 replicates: a per-metric-seed numpy loop like AuthEval's evaluator against
   `autheval evaluate` with each of our schemes (evaluator, reference, poisson); values checked.
2. All six reference traces plus the paired contrast in one process: the numpy per-replicate loop
   (benchmarks/numpy_loop.py traces) against `autheval compare` (reference scheme, 5000 replicates);
   every published cell checked to 1e-12.
3. Issue 30's rows of the small-log path (1M reference, 1M and 100k evaluator, the six traces),
   from the figures of 1 and 2, each beside its goal.
4. Fixed cost: `autheval evaluate` on the 4-row example (best of 5), and which heavy modules
   `autheval --help` loads.
5. Scale: the poisson scheme on 10M records in 1M clusters, 1000 replicates: read + validate,
   estimate, where the estimate's time goes (weights, their product with the cluster statistics, the
   SQL around them), peak memory.
6. Inner loops, in this process: counting numpy's stream (`integers` + `bincount` against the C
   extension autheval/estimation/_stream_counts.c) and the poisson weights (numpy hash against C), per draw or
   weight, results checked identical.

Usage: python benchmarks/estimators.py [--sizes example,100k,1m] [--skip-scale] [--cases 10000000]
                                        [--clusters 1000000] [--poisson-reps 1000]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peer import (
    best_of,
    evaluate_command,
    example_log,
    machine_line,
    peer_table,
    synthetic_log,
    table_parser,
    warm_bytecode,
)

TRACES = {  # analysis name -> reference table name
    "Mixed": "trace_mixed",
    "Capacity ceiling": "trace_capacity_ceiling",
    "Safety floor": "trace_safety_floor",
    "MedGemma readout": "trace_medgemma_readout",
    "LLaVA-Med head": "trace_llava_med_head",
    "CLIP probe": "trace_clip_probe",
}
CONTRAST = ("CLIP probe", "LLaVA-Med head")


def trace_file(table: str) -> Path:
    """The published CSV when ../shared is there, else the package's Parquet copy."""
    from autheval.reference_data import FILES, reference_path

    shared = ROOT.parent / "shared" / "reference" / FILES[table]
    return shared if shared.exists() else reference_path(table)


def six_traces(runs: int) -> tuple[float, float]:
    """The six traces and the contrast: (the loop's seconds, ours), each best of `runs`, printed."""
    arms = [f"{name}={trace_file(table)}" for name, table in TRACES.items()]
    machine = machine_line()
    loop_wall, loop_peak, out = best_of(
        [sys.executable, str(ROOT / "benchmarks" / "numpy_loop.py"), "traces", *arms, "--contrast", *CONTRAST], runs
    )
    loop = json.loads(out.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "autheval",
            "compare",
            "--scheme",
            "reference",
            "--reps",
            "5000",
            "--output-dir",
            tmp,
            "--no-progress",
            "--contrast",
            f"{CONTRAST[0]} minus {CONTRAST[1]}",
        ]
        for arm in arms:
            command += ["--arm", arm]
        ours_wall, ours_peak, _ = best_of(command, runs)
        with open(Path(tmp) / "proposal_dependence_summary.csv", newline="") as handle:
            proposals = {r["proposal"]: r for r in csv.DictReader(handle)}
        with open(Path(tmp) / "paired_contrast.csv", newline="") as handle:
            contrast = {r["unit"]: r for r in csv.DictReader(handle)}
    worst = 0.0
    for name, expected in loop["arms"].items():
        row = proposals[name]
        for ours, theirs in (
            ("Delta_authority_image", "Delta_authority"),
            ("intervention_rate", "intervention_rate"),
            ("delta", "delta"),
            ("Delta_authority_cluster", "Delta_authority_cluster"),
        ):
            worst = max(worst, abs(float(row[ours]) - expected[theirs]))
        for suffix in ("ci_lower", "ci_upper"):
            worst = max(
                worst,
                abs(float(row[f"Delta_authority_image_{suffix}"]) - expected[f"Delta_authority_{suffix}"]),
                abs(float(row[f"Delta_authority_cluster_{suffix}"]) - expected[f"Delta_authority_cluster_{suffix}"]),
            )
    for unit, row in contrast.items():
        lo, hi = loop["contrast"][f"{unit}_ci"]
        worst = max(
            worst,
            abs(float(row["difference"]) - loop["contrast"][unit]),
            abs(float(row["ci_lower"]) - lo),
            abs(float(row["ci_upper"]) - hi),
        )
    print("\n== six reference traces + paired contrast, 5000 replicates, reference scheme, whole process")
    print(machine)
    print(f"  {'numpy per-replicate loop':40s} {loop_wall:7.2f} s  {loop_peak:6.0f} MB")
    print(
        f"  {'autheval compare (six arms, contrast)':40s} {ours_wall:7.2f} s  {ours_peak:6.0f} MB   "
        f"{loop_wall / ours_wall:5.2f}x faster; max |difference| {worst:.1e} "
        f"({'equal to 1e-12' if worst <= 1e-12 else 'MISMATCH'})"
    )
    return loop_wall, ours_wall


def small_log_rows(table: list[dict], traces: tuple[float, float] | None) -> None:
    """Issue 30's rows of the small-log path, from the figures printed above (same run): each ratio or
    figure beside its goal, with the machine line now."""
    by_log = {row["log"]: row for row in table}
    lines = []
    big, small = by_log.get("1,000,000 cases, 100,000 clusters"), by_log.get("100,000 cases, 10,000 clusters")
    if big:
        loop, _ = big["baseline"]
        lines.append(("1M cases, reference scheme vs the loop", f"{loop / big['reference'][0]:.2f}x", "at least 12x"))
        wall, peak = big["evaluator"]
        lines.append(("1M cases, evaluator scheme", f"{loop / wall:.2f}x, {peak:.0f} MB", "kept: 3.24x, 391 MB"))
    if small:
        (loop, loop_peak), (wall, peak) = small["baseline"], small["evaluator"]
        figure = f"{loop / wall:.2f}x, {peak:.0f} MB (loop {loop_peak:.0f} MB)"
        lines.append(("100k cases, evaluator scheme", figure, "at most the loop's memory"))
    if traces:
        lines.append(("six traces + contrast, one compare", f"{traces[0] / traces[1]:.2f}x", "at least 3x"))
    if not lines:
        return
    print("\n== issue 30, the small-log path (the figures above, against the numpy loop of the same run)")
    print(machine_line())
    for work, figure, goal in lines:
        print(f"  {work:40s} {figure:34s} goal: {goal}")


def fixed_cost(runs: int) -> None:
    """The fixed cost of a command, whole process, best of `runs`: the 4-row example evaluated
    (peer.evaluate_command) and `autheval --help` with the heavy modules it loads."""
    machine = machine_line()
    command = evaluate_command(example_log(), "{out}")
    with tempfile.TemporaryDirectory() as tmp:
        wall, peak, _ = best_of([c.replace("{out}", tmp) for c in command], runs)
    probe = (
        "import sys, io, contextlib\nfrom autheval.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try: main(['--help'])\n    except SystemExit: pass\n"
        "print(' '.join(m for m in ('numpy', 'duckdb', 'pyarrow', 'pandas', 'dagster', 'torch') if m in sys.modules))"
    )
    help_wall, _, loaded = best_of([sys.executable, "-c", probe], runs)
    print("\n== fixed cost, whole process")
    print(machine)
    print(f"  {'autheval evaluate, 4-row example':40s} {wall:7.2f} s  {peak:6.0f} MB   (best of {runs}; goal 0.35 s)")
    print(f"  {'autheval --help':40s} {help_wall:7.2f} s   heavy modules loaded: {loaded.strip() or 'none'}")


def scale_child(args) -> None:
    """In a child: read the log, estimate with the poisson scheme, time the phases; print JSON. The
    process is set up as `autheval evaluate` sets up its own (one BLAS thread, no pandas or
    pyarrow.dataset)."""
    import os
    import resource
    import threading

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from autheval.cli.evaluate import _UnneededImports

    sys.meta_path.insert(0, _UnneededImports())

    import autheval.estimation.bootstrap as bootstrap
    import autheval.estimation.estimators as estimators
    from autheval.records.read import read_records

    cpu = {"weights": 0.0, "products_cpu": 0.0, "products_wall": 0.0, "sql": 0.0}
    lock = threading.Lock()
    weights, products, to_table, rows = (
        bootstrap.poisson_weights,
        estimators.poisson_products,
        estimators.sql.to_table,
        estimators.sql.rows,
    )

    def timed_weights(*a, **k):
        t0 = time.thread_time()
        out = weights(*a, **k)
        with lock:
            cpu["weights"] += time.thread_time() - t0
        return out

    def timed(key, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            cpu[key] += time.perf_counter() - t0
            return out

        return wrapper

    def timed_products(*a, **k):
        w0, c0 = time.perf_counter(), time.process_time()
        out = products(*a, **k)
        cpu["products_wall"] += time.perf_counter() - w0
        cpu["products_cpu"] += time.process_time() - c0
        return out

    bootstrap.poisson_weights = timed_weights
    estimators.poisson_products = timed_products
    estimators.sql.to_table = timed("sql", to_table)
    estimators.sql.rows = timed("sql", rows)
    t0 = time.perf_counter()
    records = read_records(args.log, analysis="scale")
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = estimators.estimate([records], scheme="poisson", reps=args.reps)
    t_est = time.perf_counter() - t0
    gap = result.estimate("scale", "image_weighted", "Delta_authority")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "read_validate_s": t_read,
                "estimate_s": t_est,
                "peak_mb": peak_mb,
                **cpu,
                "n_cases": records.n_cases,
                "n_clusters": records.n_clusters,
                "Delta": gap["estimate"],
                "ci": [gap["ci_lower"], gap["ci_upper"]],
            }
        )
    )


def scale_run(cases: int, clusters: int, reps: int) -> None:
    """The poisson scheme at scale: a synthetic log (peer.synthetic_log) as Parquet, estimated in a child
    process (scale_child), its phases and peak memory printed."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.parquet"
        t0 = time.perf_counter()
        pq.write_table(synthetic_log(cases, clusters), log)
        print(f"\n(generated {cases:,} records in {clusters:,} clusters in {time.perf_counter() - t0:.1f} s)")
        machine = machine_line()
        wall, peak, out = best_of(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(log), "--reps", str(reps)], 1
        )
    r = json.loads(out.strip().splitlines()[-1])
    other = r["estimate_s"] - r["products_wall"] - r["sql"]
    print(
        f"== poisson scheme, {r['n_cases']:,} records, {r['n_clusters']:,} clusters, {reps} replicates (child process)"
    )
    print(machine)
    print(f"  read + validate : {r['read_validate_s']:7.2f} s")
    print(f"  estimate        : {r['estimate_s']:7.2f} s  (both units, every metric, intervals, identity check)")
    print(
        f"    replicate sums: {r['products_wall']:7.2f} s  (CPU on all threads: weights {r['weights']:.1f} s, their "
        f"product with the cluster statistics, the join, {r['products_cpu'] - r['weights']:.1f} s)"
    )
    print(
        f"    SQL           : {r['sql']:7.2f} s  (metrics, intervals, identity check; "
        "the cluster statistics are summed in the read)"
    )
    print(f"    rest          : {other:7.2f} s  (cluster matrix to numpy, replicate rows into DuckDB)")
    print(f"  in all          : {r['read_validate_s'] + r['estimate_s']:7.2f} s  (goal: under 60 s)")
    print(f"  peak memory     : {r['peak_mb']:7.0f} MB (the child process; goal: under 2 GB)")
    print(f"  Delta (image)   : {r['Delta']:.6f} [{r['ci'][0]:.6f}, {r['ci'][1]:.6f}]")


def inner_loops(clusters: int = 100_000, rows: int = 16, repeats: int = 10) -> None:
    """ns per draw (counting) and per weight (poisson), numpy against the C extension, same numbers."""
    import numpy as np

    from autheval.estimation import bootstrap
    from autheval.estimation.compiled_stream import extension

    machine = machine_line()
    print("\n== inner loops, one thread, this process")
    print(machine)
    if extension() is None:
        print("  the C extension autheval.estimation._stream_counts is not built here: nothing to compare")
        return
    g, seed, sizes = clusters, 20260710, [rows] * repeats

    # the library's own counting paths (autheval.estimation.bootstrap), side by side, each block timed and compared
    numpy_path = bootstrap.stream_counts(seed, g, sizes, prefetch=False, compiled=False)
    c_path = bootstrap.stream_counts(seed, g, sizes, prefetch=False, compiled=True)
    numpy_s = c_s = 0.0
    same = True
    for _ in sizes:
        t0 = time.perf_counter()
        expected = next(numpy_path)
        t1 = time.perf_counter()
        counts = next(c_path)
        t2 = time.perf_counter()
        numpy_s, c_s = numpy_s + t1 - t0, c_s + t2 - t1
        same = same and np.array_equal(expected, counts)
    n = repeats * rows * g
    print(
        f"  {'counting numpy stream, numpy':40s} {numpy_s / n * 1e9:6.2f} ns a draw   "
        f"({g:,} clusters, {rows * repeats} replicates)"
    )
    print(
        f"  {'counting numpy stream, C extension':40s} {c_s / n * 1e9:6.2f} ns a draw   "
        f"{numpy_s / c_s:5.2f}x faster; counts {'identical' if same else 'DIFFERENT'}"
    )
    reps, ranks = 64, 65_536
    t0 = time.perf_counter()
    ref = bootstrap.numpy_poisson_weights(20260711, 0, reps, 0, ranks)
    t1 = time.perf_counter()
    ours = bootstrap.poisson_weights(20260711, 0, reps, 0, ranks)
    t2 = time.perf_counter()
    n = reps * ranks
    print(f"  {'poisson weights, numpy':40s} {(t1 - t0) / n * 1e9:6.2f} ns a weight")
    print(
        f"  {'poisson weights, C extension':40s} {(t2 - t1) / n * 1e9:6.2f} ns a weight   "
        f"{(t1 - t0) / (t2 - t1):5.2f}x faster; weights {'identical' if np.array_equal(ref, ours) else 'DIFFERENT'}"
    )


def main() -> int:
    """The estimators' benchmarks in turn: the issue's table (peer.py's flags), then the rest of this file's."""
    parser = table_parser(__doc__, "logs of the issue's table (peer.py)", "best of this many runs per table command")
    parser.add_argument("--cases", type=int, default=10_000_000)
    parser.add_argument("--clusters", type=int, default=1_000_000)
    parser.add_argument("--poisson-reps", type=int, default=1000)
    parser.add_argument("--skip-scale", action="store_true", help="skip the 10M-record poisson run")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.log = args.child
        scale_child(args)
        return 0
    warm_bytecode()
    table = peer_table([s.strip() for s in args.sizes.split(",") if s.strip()], 5000, args.runs)
    small_log_rows(table, six_traces(max(args.runs, 3)))
    fixed_cost(5)
    if not args.skip_scale:
        scale_run(args.cases, args.clusters, args.poisson_reps)
    inner_loops()
    return 0


if __name__ == "__main__":
    sys.exit(main())
