"""Coverage of the intervals with few clusters (issue 28, section 4): a simulation at G = 5, 10, 20, 50
clusters printing, per metric and unit, how often the nominal 95% interval contains the true value, with
its Monte Carlo standard error, for the whole-cluster bootstrap (reference scheme) and the delta method
before (normal quantiles) and after (Student t with G - 1 degrees of freedom) the change; and how
often each p-value of "the gap is 0" falls below 0.05 when the gap is 0 (the floors' effect).

The model (known truth): cluster sizes 1 + Poisson(2); per cluster an intervention probability
p_c ~ Beta(2, 3) (mean 0.4) and effects on the executed score (SD 0.5) and on the gap (SD 0.4); per
case I ~ Bernoulli(p_c), executed score mean -1 (SD 1), and on a changed case a gap of mean `--gap`
(0.25 by default; skewed: 0.5 (Exp(1) - 1) around it, plus the cluster effect; 0 for the null table).
Sizes, intervention probabilities and effects are independent, so the image-weighted and cluster-equal estimands agree:
J = -1, intervention_rate = 0.4, Delta_authority = 0.4 * gap.

Each simulated data set is one analysis of one `estimate` call (a batch of `--batch` data sets per call,
each batch with its own seed, so batches do not share resamples); the Monte Carlo standard error
sqrt(c (1 - c) / R) treats the R data sets as independent (within a batch they share the bootstrap's
index stream, a small dependence). Figures: docs/benchmarks.md, "Few clusters".

Usage: python benchmarks/small_sample_coverage.py [--clusters 5,10,20,50] [--sims 300] [--reps 1000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import pyarrow as pa

MEAN_J, RATE = -1.0, 0.4
METRICS = (
    ("J", "image_weighted"),
    ("intervention_rate", "image_weighted"),
    ("Delta_authority", "image_weighted"),
    ("Delta_authority", "cluster_equal"),
)
METHODS = ("bootstrap", "delta_normal", "delta_t")


def simulate(rng: np.random.Generator, clusters: int, gap: float) -> pa.Table:
    """One data set of `clusters` clusters in the AuthEval log schema."""
    sizes = 1 + rng.poisson(2.0, clusters)
    p_c = rng.beta(2.0, 3.0, clusters)
    exec_effect = rng.normal(0.0, 0.5, clusters)
    gap_effect = rng.normal(0.0, 0.4, clusters)
    cluster = np.repeat(np.arange(clusters), sizes)
    n = int(sizes.sum())
    changed = rng.random(n) < p_c[cluster]
    executed = MEAN_J + exec_effect[cluster] + rng.normal(0.0, 1.0, n)
    skewed = gap + 0.5 * (rng.exponential(1.0, n) - 1.0)  # mean `gap`, right-skewed
    gaps = np.where(changed, skewed + gap_effect[cluster], 0.0)
    return pa.table(
        {
            "case_id": [f"c{i}" for i in range(n)],
            "cluster_id": [f"k{c:04d}" for c in cluster],
            "proposed_action": np.where(changed, "a2", "a1").tolist(),
            "executed_action": ["a1"] * n,
            "utility_executed_local": executed,
            "utility_proposed_local": executed + gaps,
        }
    )


def truth(metric: str, gap: float) -> float:
    return {"J": MEAN_J, "intervention_rate": RATE, "Delta_authority": RATE * gap}[metric]


def run(clusters: int, sims: int, reps: int, gap: float, batch: int = 100, seed: int = 20260528) -> dict:
    """{(metric, unit, method): [covered, ...]} and {(unit, method): [p-values]} over `sims` data sets."""
    from autheval.estimation.analytic import delta_method_rows
    from autheval.estimation.estimators import estimate
    from autheval.records.read import records_from_table
    from warehouse.sql import connect

    rng = np.random.default_rng(seed + clusters)
    covered: dict = {}
    p_values: dict = {}
    con = connect()
    for first in range(0, sims, batch):
        size = min(batch, sims - first)
        recordsets = [
            records_from_table(simulate(rng, clusters, gap), f"sim{first + i}", f"sim{first + i}", "0" * 64, con=con)
            for i in range(size)
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # every data set is small: the warnings are the point here
            result = estimate(recordsets, scheme="reference", reps=reps, seed=seed + first)
            delta = {
                dist: {
                    (r["analysis"], r["unit"], r["metric"]): r for r in delta_method_rows(recordsets, distribution=dist)
                }
                for dist in ("normal", "t")
            }
        for records in recordsets:
            for metric, unit in METRICS:
                value = truth(metric, gap)
                rows = {
                    "bootstrap": result.estimate(records.analysis, unit, metric),
                    "delta_normal": delta["normal"][(records.analysis, unit, metric)],
                    "delta_t": delta["t"][(records.analysis, unit, metric)],
                }
                for method, row in rows.items():
                    lo, hi = row["ci_lower"], row["ci_upper"]
                    covered.setdefault((metric, unit, method), []).append(lo is not None and lo <= value <= hi)
            for unit in ("image_weighted", "cluster_equal"):
                p_values.setdefault(unit, []).append(
                    result.estimate(records.analysis, unit, "Delta_authority")["p_value"]
                )
    return {"covered": covered, "p_values": p_values}


def coverage(hits: list[bool]) -> tuple[float, float]:
    """The share covered and its Monte Carlo standard error."""
    c = sum(hits) / len(hits)
    return c, math.sqrt(c * (1 - c) / len(hits))


def table(results: dict[int, dict]) -> list[str]:
    """Markdown: one row per G, metric and unit; coverage +/- MC SE per method."""
    lines = [
        "| G | metric (unit) | bootstrap (reference) | delta, normal (before) | delta, t with G-1 df (after) |",
        "|---|---|---|---|---|",
    ]
    for clusters, out in results.items():
        for metric, unit in METRICS:
            cells = []
            for method in METHODS:
                c, se = coverage(out["covered"][(metric, unit, method)])
                cells.append(f"{c:.3f} ± {se:.3f}")
            lines.append(f"| {clusters} | {metric} ({unit}) | " + " | ".join(cells) + " |")
    return lines


def null_table(results: dict[int, dict]) -> list[str]:
    """Markdown: with no gap, the share of bootstrap p-values below 0.05 and the smallest one."""
    lines = ["| G | unit | share p < 0.05 (nominal 0.05) | smallest p |", "|---|---|---|---|"]
    for clusters, out in results.items():
        for unit, ps in out["p_values"].items():
            share, se = coverage([p < 0.05 for p in ps])
            lines.append(f"| {clusters} | {unit} | {share:.3f} ± {se:.3f} | {min(ps):.4g} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="5,10,20,50", help="cluster counts G (default 5,10,20,50)")
    parser.add_argument("--sims", type=int, default=300, help="simulated data sets per G (default 300)")
    parser.add_argument("--reps", type=int, default=1000, help="bootstrap replicates (default 1000)")
    parser.add_argument("--gap", type=float, default=0.25, help="mean gap on a changed case (default 0.25)")
    args = parser.parse_args(argv)
    sizes = [int(g) for g in args.clusters.split(",")]
    started = time.monotonic()
    results = {g: run(g, args.sims, args.reps, args.gap) for g in sizes}
    print(f"Coverage of nominal 95% intervals, {args.sims} data sets per G, {args.reps} bootstrap replicates")
    print("\n".join(table(results)))
    nulls = {g: run(g, args.sims, args.reps, 0.0) for g in sizes}
    print(f"\nWith no gap (Delta_authority = 0): bootstrap p-values of 'the gap is 0', {args.sims} data sets per G")
    print("\n".join(null_table(nulls)))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
