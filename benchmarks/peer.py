"""Our three bootstrap schemes against a per-metric-seed numpy loop like AuthEval's generic evaluator,
whole process against whole process, in one run.

For each log (the 4-row example, 100k cases in 10k clusters, 1M cases in 100k clusters; 5000 replicates)
every command runs in a child process, timed from its start to its end, with its own peak memory (the
child's maximum resident set, from wait4):

* baseline: `benchmarks/numpy_loop.py evaluate LOG` (spec 6.7 written as plain numpy: per metric
  `default_rng(seed + offset)`, one `integers(0, G, size=G)` per replicate, delta over the intervened
  clusters only, image-weighted ratio of resampled sums);
* ours: `autheval evaluate --input LOG --scheme evaluator|reference|poisson` (both units, every metric,
  identity checks, four result files).

The evaluator scheme's numbers are checked equal to the loop's (estimates and interval ends, every
metric the log supports: exactly, or the largest difference is printed); the other schemes share the
point estimates (checked) and have intervals of their own. Every figure is printed with the machine
line (cores, available memory, load average) measured just before it.

Usage: python benchmarks/peer.py [--sizes example,100k,1m] [--reps 5000] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = {"100k": (100_000, 10_000), "1m": (1_000_000, 100_000)}
SCHEMES = ("evaluator", "reference", "poisson")
EXACT = 1e-12


def machine_line() -> str:
    """cores, available memory, load average: the conditions of the figure printed next to it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    available = "?"
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = f"{int(line.split()[1]) / 1024 / 1024:.1f} GB"
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"[machine: {cores} cores, {available} available, load average {load}]"


def warm_bytecode() -> None:
    """Compile the project's modules to bytecode first, as pip does for an installed package: an
    editable checkout (or PYTHONDONTWRITEBYTECODE) would otherwise recompile them in every timed
    process (about 0.1 s here), which the baseline's one file does not pay."""
    import compileall

    for package in ("autheval", "warehouse", "sql", "benchmarks"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def child_rusage(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak resident MB, stdout) of one child process, from fork to exit; reaped with
    wait4, so the peak memory is that child's own."""
    read_fd, write_fd = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: stdout into the pipe, stderr to /dev/null, then exec
        os.close(read_fd)
        os.dup2(write_fd, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.chdir(ROOT)
        try:
            os.execvpe(command[0], command, {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        finally:
            os._exit(127)
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss / 1024, b"".join(chunks).decode()


def best_of(command: list[str], runs: int) -> tuple[float, float, str]:
    best = None
    for _ in range(runs):
        result = child_rusage(command)
        if best is None or result[0] < best[0]:
            best = result
    return best


def synthetic_log(cases: int, clusters: int):
    """The deterministic synthetic log of sql/records/synthetic_log.sql (no global utility) as an Arrow
    table: the one generator of every benchmark's large logs (here as CSV, benchmarks/estimators.py's as
    Parquet)."""
    import duckdb

    from warehouse.sql import load_sql

    con = duckdb.connect()
    try:
        params = {"first_case": 0, "n_cases": cases, "n_clusters": clusters}
        return con.execute(load_sql("records/synthetic_log"), params).arrow().read_all()
    finally:
        con.close()


def write_log(path: Path, cases: int, clusters: int) -> None:
    """The synthetic log (synthetic_log) as CSV."""
    from pyarrow import csv as pacsv

    pacsv.write_csv(synthetic_log(cases, clusters), path)


def evaluate_command(log: Path, out, *flags: str) -> list[str]:
    """`autheval evaluate --input LOG [flags] --output-dir OUT --no-progress` in a fresh interpreter: the
    command every benchmark times, written once."""
    return [
        sys.executable,
        "-m",
        "autheval",
        "evaluate",
        "--input",
        str(log),
        *flags,
        "--output-dir",
        str(out),
        "--no-progress",
    ]


def example_log() -> Path:
    from autheval.reference_data import FILES, reference_path

    shared = ROOT.parent / "shared" / "reference" / FILES["authority_log_example"]
    return shared if shared.exists() else reference_path("authority_log_example")


def ours(log: Path, scheme: str, reps: int, out: Path, runs: int) -> tuple[float, float, dict]:
    """(wall, peak, n, clusters and metrics of the summary) of our `autheval evaluate` on `log` with one
    scheme, best of `runs` (evaluate_command)."""
    command = evaluate_command(log, out, "--scheme", scheme, "--reps", str(reps))
    wall, peak, _ = best_of(command, runs)
    summary = json.loads((out / "summary.json").read_text())
    numbers = {
        m: (v["estimate"], v["ci_lower"], v["ci_upper"]) for m, v in summary["metrics"].items() if v["available"]
    }
    return wall, peak, {"n": summary["n"], "n_clusters": summary["n_clusters"], "metrics": numbers}


def baseline(log: Path, reps: int, runs: int) -> tuple[float, float, dict]:
    command = [sys.executable, str(ROOT / "benchmarks" / "numpy_loop.py"), "evaluate", str(log), "--reps", str(reps)]
    wall, peak, out = best_of(command, runs)
    return wall, peak, {m: tuple(v) for m, v in json.loads(out.strip().splitlines()[-1]).items()}


def largest_difference(a: dict, b: dict, ends: bool = True) -> float:
    """Largest |difference| over the metrics both give (estimates, and interval ends when `ends`)."""
    if set(a) != set(b):
        return float("inf")
    worst = 0.0
    for metric in a:
        for x, y in zip(a[metric][: 3 if ends else 1], b[metric][: 3 if ends else 1]):
            worst = max(worst, abs(x - y))
    return worst


def verdict(worst: float) -> str:
    if worst == 0.0:
        return "identical (exactly)"
    return f"equal to {worst:.1e}" if worst <= EXACT else f"MISMATCH ({worst:.3e})"


def peer_table(sizes: list[str], reps: int, runs: int) -> list[dict]:
    """Run and print the table; return its rows (for the README figures)."""
    warm_bytecode()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for size in sizes:
            if size == "example":
                log, label = example_log(), "4-row example"
            else:
                cases, clusters = SIZES[size]
                log = tmp / f"log_{size}.csv"
                write_log(log, cases, clusters)
                label = f"{cases:,} cases, {clusters:,} clusters"
            machine = machine_line()
            b_wall, b_peak, b_values = baseline(log, reps, runs)
            row = {"log": label, "baseline": (b_wall, b_peak), "machine": machine}
            checks = {}
            for scheme in SCHEMES:
                wall, peak, result = ours(log, scheme, reps, tmp / f"out_{size}_{scheme}", runs)
                row[scheme] = (wall, peak)
                worst = largest_difference(result["metrics"], b_values, ends=scheme == "evaluator")
                checks[scheme] = ("values " if scheme == "evaluator" else "point estimates ") + verdict(worst)
            row["checks"] = checks
            rows.append(row)
            print_row(row, reps)
    return rows


def print_row(row: dict, reps: int) -> None:
    b_wall, b_peak = row["baseline"]
    print(f"\n== {row['log']}, {reps} replicates, whole process (start to end), peak memory of the process")
    print(row["machine"])
    print(f"  {'numpy loop (AuthEval-style evaluator)':40s} {b_wall:7.2f} s  {b_peak:6.0f} MB")
    for scheme in SCHEMES:
        wall, peak = row[scheme]
        print(
            f"  {'ours, ' + scheme + ' scheme':40s} {wall:7.2f} s  {peak:6.0f} MB   "
            f"{b_wall / wall:5.2f}x faster, {peak / b_peak:4.2f}x the memory; {row['checks'][scheme]}"
        )


def table_parser(doc: str, sizes_help: str, runs_help: str) -> argparse.ArgumentParser:
    """A benchmark's parser with the issue table's flags (--sizes, --runs), defined once for this script
    and benchmarks/estimators.py, which prints the same table."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="example,100k,1m", help=sizes_help)
    parser.add_argument("--runs", type=int, default=1, help=runs_help)
    return parser


def main() -> int:
    """The issue's table: the numpy loop against our three schemes, per log size."""
    parser = table_parser(
        __doc__, "comma-separated: example, 100k, 1m", "best of this many runs per command (default 1)"
    )
    parser.add_argument("--reps", type=int, default=5000)
    args = parser.parse_args()
    peer_table([s.strip() for s in args.sizes.split(",") if s.strip()], args.reps, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
