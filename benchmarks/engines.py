"""Engines at scale: the `poisson` bootstrap and the delta-method intervals at 1M and 10M records, on
DuckDB (the default engine, in process) and on local Spark (local[N] through the engine seam), in one
run: wall time per phase and the peak memory of the whole process tree (Python and, for Spark, its
JVM), each case in a fresh child process.

    .venv/bin/python benchmarks/engines.py [--sizes 1000000 10000000] [--reps 200] [--engines duckdb spark]

The logs are sql/records/synthetic_log.sql (10 records per cluster, about 30% of proposals replaced). The same
numbers must come out of both engines: the child prints Delta and its interval, and the parent checks
that the engines agree (1e-9; the exact matrix at 1e-12 is tests/test_engines.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed_estimates(source, engine_name: str, reps: int, spark_memory: str) -> tuple[dict, object]:
    """One engine on one log (a file or a dataset): start the engine, read + validate the records, the
    poisson bootstrap, the delta method; the phases' times and the numbers (JSON-ready), and the records."""
    from autheval.estimation.analytic import delta_method_rows
    from autheval.estimation.estimators import estimate
    from autheval.records.read import read_records

    times = {}
    t0 = time.perf_counter()
    engine = None
    if engine_name != "duckdb":
        from warehouse.engine import EngineConfig, connect_engine

        engine = connect_engine(EngineConfig("spark", spark_driver_memory=spark_memory))
    times["engine_start_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    records = read_records(source, analysis="scale")
    times["read_validate_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = estimate([records], scheme="poisson", reps=reps, engine=engine)
    times["poisson_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    delta = {(r["unit"], r["metric"]): r for r in delta_method_rows([records], engine=engine)}
    times["delta_method_s"] = time.perf_counter() - t0
    if engine is not None:
        engine.close()
    boot = result.estimate("scale", "image_weighted", "Delta_authority")
    dm = delta[("image_weighted", "Delta_authority")]
    return {
        **times,
        "n_cases": records.n_cases,
        "n_clusters": records.n_clusters,
        "bootstrap": [boot["estimate"], boot["ci_lower"], boot["ci_upper"]],
        "delta_method": [dm["estimate"], dm["ci_lower"], dm["ci_upper"]],
    }, records


def child(args) -> None:
    """One engine on one log, printed as JSON (timed_estimates)."""
    print(json.dumps(timed_estimates(args.log, args.engine, args.reps, args.spark_memory)[0]))


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (Linux /proc), in MB."""
    children: dict[int, list[int]] = {}
    rss = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total / 2**20


def run_sampled(command: list[str], label: str, env: dict | None = None) -> dict:
    """Run a benchmark child; its last stdout line (JSON) with `wall_s` and `peak_mb`: the whole process
    tree's peak RSS (Python and a JVM), sampled every 0.2 s."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    peak = [0.0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_mb(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.perf_counter()
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{label} child failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "wall_s": time.perf_counter() - started, "peak_mb": peak[0]}


def run_child(log: Path, engine: str, reps: int, spark_memory: str) -> dict:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--log",
        str(log),
        "--engine",
        engine,
        "--reps",
        str(reps),
        "--spark-memory",
        spark_memory,
    ]
    return run_sampled(command, engine)


def synthetic_log(folder: Path, cases: int) -> Path:
    import duckdb
    import pyarrow.parquet as pq

    from warehouse.sql import load_sql

    path = folder / f"log_{cases}.parquet"
    con = duckdb.connect()
    reader = con.execute(
        load_sql("records/synthetic_log"), {"first_case": 0, "n_cases": cases, "n_clusters": cases // 10}
    ).arrow()
    table = reader.read_all() if hasattr(reader, "read_all") else reader
    pq.write_table(table, path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--engines", nargs="+", default=["duckdb", "spark"])
    parser.add_argument("--spark-memory", default="6g", help="the local Spark driver's heap")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    cores = os.cpu_count()
    load = os.getloadavg()[0]
    print(
        f"machine: {cores} cores, load average {load:.1f}; poisson bootstrap with {args.reps} replicates, "
        f"delta method; Spark local[{cores}]"
    )
    print(
        f"{'records':>11} {'clusters':>10} {'engine':>7} {'start':>7} {'read':>7} {'poisson':>8} "
        f"{'delta':>7} {'wall':>7} {'peak MB':>8}   Delta [bootstrap CI] / [delta-method CI]"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for cases in args.sizes:
            log = synthetic_log(Path(tmp), cases)
            results = {}
            for engine in args.engines:
                r = run_child(log, engine, args.reps, args.spark_memory)
                results[engine] = r
                b, d = r["bootstrap"], r["delta_method"]
                print(
                    f"{r['n_cases']:>11,} {r['n_clusters']:>10,} {engine:>7} {r['engine_start_s']:>6.1f}s "
                    f"{r['read_validate_s']:>6.1f}s {r['poisson_s']:>7.1f}s {r['delta_method_s']:>6.1f}s "
                    f"{r['wall_s']:>6.1f}s {r['peak_mb']:>8.0f}   {b[0]:.6f} [{b[1]:.6f}, {b[2]:.6f}] / "
                    f"[{d[1]:.6f}, {d[2]:.6f}]",
                    flush=True,
                )
            if len(results) == 2:
                a, c = results.values()
                worst = max(
                    abs(x - y) for x, y in zip(a["bootstrap"] + a["delta_method"], c["bootstrap"] + c["delta_method"])
                )
                print(f"{'':>11} engines agree: max difference {worst:.1e}" + ("" if worst <= 1e-9 else "  MISMATCH"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
