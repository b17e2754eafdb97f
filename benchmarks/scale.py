"""Scale past one process's memory: a hash-generated Parquet log (a folder of files, 10 records per
cluster) read where it lies, at 10^7 and 10^8 records, the `poisson` bootstrap (1000 replicates) plus the
delta method, whole process: one child process per size (read + validate, bootstrap, delta method), its
wall time, peak resident memory and bytes of peak memory per record. Then, with --spark, a dataset
(the largest, or --spark-size) read by Spark itself (`--engine spark`, local[N]): the Python driver's own peak,
the JVM's and the process tree's.

    .venv/bin/python benchmarks/scale.py [--sizes 10000000 100000000] [--reps 1000] [--data /tmp/autheval-scale]
                                        [--rows-per-file 5000000] [--spark] [--spark-reps 20] [--keep]
    .venv/bin/python benchmarks/scale.py --sizes 1000000 --spark      # the small case, about a minute

The data (sql/records/synthetic_log.sql, written a file at a time, streaming)
goes under --data (not the repository; 10^8 records are about 1 GB), is reused when it is already there,
and is removed at the end unless --keep. Goals on a 2-core machine (issue 19): 10^8 records under 3 minutes
and 3 GB peak, 10^7 under 1 GB; on local Spark the driver's peak under 2 GB; issue 30: 10^8 under 60 s and
1.5 GB (printed met or NOT met). Each DuckDB run prints its phases (class Phases: read, sums, replicate
sums, the weights' CPU, metrics and quantiles, with each phase's peak memory). Every figure is printed with
the machine line (cores, available memory, load average) taken just before it: on a shared machine the
times are pessimistic.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.engines import run_sampled, timed_estimates
from benchmarks.peer import child_rusage, machine_line, warm_bytecode

CLUSTER_SIZE = 10  # records per cluster
# issue 30's goals for a whole process on DuckDB, by records: (seconds, peak MB); 10^7: as it was (8.6 s, 650 MB)
GOALS = {100_000_000: (60.0, 1500.0)}


def write_dataset(folder: Path, records: int, rows_per_file: int) -> Path:
    """The hash-generated log of `records` records as Parquet files of `rows_per_file` rows, written
    streaming by DuckDB (bounded memory); kept when a complete one is already there."""
    import pyarrow.parquet as pq

    from warehouse.sql import connect, to_parquet

    target = folder / f"log_{records}"
    done = target / "_COMPLETE"
    if done.exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    con = connect(memory_limit="1GB")
    started = time.perf_counter()
    for k, first in enumerate(range(0, records, rows_per_file)):
        to_parquet(
            con,
            "records/synthetic_log",
            target / f"part-{k:05d}.parquet",
            {
                "first_case": first,
                "n_cases": min(rows_per_file, records - first),
                "n_clusters": records // CLUSTER_SIZE,
            },
        )
    con.close()
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in target.glob("part-*.parquet"))
    assert rows == records, (rows, records)
    size = sum(p.stat().st_size for p in target.glob("part-*.parquet"))
    print(
        f"(generated {records:,} records in {records // CLUSTER_SIZE:,} clusters, {len(list(target.glob('part-*')))} "
        f"files, {size / 1e9:.2f} GB, in {time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    done.touch()  # a marker: hidden from the dataset (a name starting with _)
    return target


class Phases:
    """Where a child's time and memory go (issue 30): the library's steps timed from outside, by wrapping
    the functions that do them (the library itself stays untimed): `read` (read_records: the rules, the
    profile and the hash) less `sums` (autheval.records.cluster_stats.compute: the per-cluster sums of every
    partition and their ranks), `replicate sums` (estimators.poisson_piece_products: the statistics
    matrix read a piece at a time, the weights and their products), `weights` (bootstrap.poisson_weights:
    seconds of CPU over every thread), the rest of the bootstrap (the metrics of every replicate and their
    quantiles); and the peak resident memory of each (sampled every 0.1 s)."""

    def __init__(self):
        import threading

        self.seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}
        self.phase = "start"
        self._lock = threading.Lock()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            with open("/proc/self/statm") as handle:
                rss = int(handle.read().split()[1]) * page / 2**20
            self.peak_mb[self.phase] = max(self.peak_mb.get(self.phase, 0.0), rss)
            time.sleep(0.1)

    def wrap(self, module, name: str, label: str, phase: bool = True) -> None:
        """Time `module.name` under `label` (summed over calls and threads); `phase`: its calls are a
        phase of their own for the memory samples (the caller's phase resumes after)."""
        inner = getattr(module, name)

        def timed(*args, **kwargs):
            before = self.phase
            if phase:
                self.phase = label
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started
                if phase:
                    self.phase = before

        setattr(module, name, timed)


def instrument() -> Phases:
    import autheval.estimation.bootstrap as bootstrap
    import autheval.estimation.estimators as estimators
    import autheval.records.cluster_stats as cluster_stats
    import autheval.records.read as read

    phases = Phases()
    phases.wrap(read, "read_records", "read")
    phases.wrap(cluster_stats, "compute", "sums")
    phases.wrap(estimators, "estimate", "bootstrap")
    phases.wrap(estimators, "poisson_piece_products", "replicate sums")
    phases.wrap(bootstrap, "poisson_weights", "weights", phase=False)
    return phases


def child(args) -> None:
    """One size in this process: read + validate the dataset where it lies, the poisson bootstrap, the
    delta method; print the phases' times, the numbers and this process's own peak as JSON."""
    import resource

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `autheval evaluate` sets it
    phases = instrument() if args.engine == "duckdb" else None
    found, records = timed_estimates(args.input, args.engine, args.reps, args.spark_memory)
    print(
        json.dumps(
            {
                **found,
                "files": len(records.dataset.files),
                "data_sha256": records.data_sha256,
                "python_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "phases": None if phases is None else {"seconds": phases.seconds, "peak_mb": phases.peak_mb},
            }
        )
    )


def child_command(args, folder: Path, engine: str, reps: int) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--input",
        str(folder),
        "--engine",
        engine,
        "--reps",
        str(reps),
        "--spark-memory",
        args.spark_memory,
    ]


def run_duckdb(args, folder: Path) -> dict:
    """The child on the default engine: wall time and peak memory of that process (wait4)."""
    wall, peak, out = child_rusage(child_command(args, folder, "duckdb", args.reps))
    return {**json.loads(out.strip().splitlines()[-1]), "wall_s": wall, "peak_mb": peak}


def run_spark(args, folder: Path) -> dict:
    """The child on local Spark: its own peak (the Python driver) from the child, the process tree's
    (Python and the JVM) sampled every 0.2 s."""
    command = child_command(args, folder, "spark", args.spark_reps)
    # the driver checks the rules itself (DuckDB, streaming): its memory limit bounds the driver's peak
    env = {**os.environ, "AUTHEVAL_DUCKDB_MEMORY": args.driver_duckdb_memory}
    return run_sampled(command, "spark", env)


def report(label: str, r: dict, reps: int) -> None:
    per_record = r["peak_mb"] * 2**20 / r["n_cases"]
    b, d = r["bootstrap"], r["delta_method"]
    print(
        f"  {label}: {r['n_cases']:,} records, {r['n_clusters']:,} clusters, {r['files']} files; poisson {reps} "
        f"replicates + delta method"
    )
    start = f"engine start {r['engine_start_s']:.1f} s, " if r["engine_start_s"] > 0.5 else ""
    print(
        f"    {start}read + validate {r['read_validate_s']:.1f} s, poisson {r['poisson_s']:.1f} s, delta method "
        f"{r['delta_method_s']:.1f} s; whole process {r['wall_s']:.1f} s"
    )
    memory = f"    peak memory {r['peak_mb']:.0f} MB ({per_record:.1f} bytes per record)"
    if "python_peak_mb" in r and label.startswith("Spark"):
        memory += f"; the Python driver alone {r['python_peak_mb']:.0f} MB, the JVM the rest"
    print(memory)
    goal = GOALS.get(r["n_cases"]) if not label.startswith("Spark") else None
    if goal:
        met = r["wall_s"] < goal[0] and r["peak_mb"] < goal[1]
        print(f"    goal (issue 30): under {goal[0]:.0f} s and {goal[1]:.0f} MB: {'met' if met else 'NOT met'}")
    phases = r.get("phases")
    if phases:
        t, m = phases["seconds"], phases["peak_mb"]
        rest = t.get("bootstrap", 0.0) - t.get("replicate sums", 0.0)
        print(
            f"    phases: read {t['read'] - t['sums']:.1f} s (the rules, the profile, the hash; peak "
            f"{m.get('read', 0):.0f} MB), sums {t['sums']:.1f} s (every partition, then the ranks; peak "
            f"{m.get('sums', 0):.0f} MB), replicate sums {t.get('replicate sums', 0):.1f} s (peak "
            f"{m.get('replicate sums', 0):.0f} MB; the weights {t.get('weights', 0):.1f} s of CPU over the threads), "
            f"metrics and quantiles {rest:.1f} s, delta method {r['delta_method_s']:.1f} s"
        )
    print(
        f"    Delta (image) {b[0]:.6f}, bootstrap [{b[1]:.6f}, {b[2]:.6f}], delta method [{d[1]:.6f}, {d[2]:.6f}]",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[10_000_000, 100_000_000],
        help="records of each DuckDB run (none: only the Spark run, of --spark-size)",
    )
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument(
        "--data",
        type=Path,
        default=Path("/tmp/autheval-scale"),
        help="where the generated datasets go (not the repository)",
    )
    parser.add_argument("--rows-per-file", type=int, default=5_000_000)
    parser.add_argument("--spark", action="store_true", help="also read a dataset with --engine spark")
    parser.add_argument(
        "--spark-size",
        type=int,
        default=None,
        help="the records of the dataset Spark reads (default: the largest of --sizes)",
    )
    parser.add_argument(
        "--spark-reps",
        type=int,
        default=20,
        help="poisson replicates on Spark (a cross join of clusters x replicates on its cores)",
    )
    parser.add_argument("--spark-memory", default="2g", help="the local Spark JVM's heap")
    parser.add_argument(
        "--driver-duckdb-memory",
        default="1GB",
        help="AUTHEVAL_DUCKDB_MEMORY of the Spark run's driver (it validates the files, streaming)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated datasets")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="duckdb", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    warm_bytecode()
    folders = {}
    try:
        print("== scale: Parquet datasets read where they lie, whole process per size (child processes)")
        for records in args.sizes:
            folders[records] = write_dataset(args.data, records, args.rows_per_file)
            print(machine_line(), flush=True)
            report("DuckDB (default engine)", run_duckdb(args, folders[records]), args.reps)
        if args.spark:
            size = args.spark_size or max(args.sizes)  # (one of the two is given)
            if size not in folders:
                folders[size] = write_dataset(args.data, size, args.rows_per_file)
            print(machine_line(), flush=True)
            report(
                f"Spark local[{os.cpu_count()}], {args.spark_memory} heap",
                run_spark(args, folders[size]),
                args.spark_reps,
            )
    finally:
        if not args.keep:
            for folder in folders.values():
                shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
