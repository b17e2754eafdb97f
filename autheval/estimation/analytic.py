"""Analytic intervals beside the bootstrap: the delta method (linearisation over clusters).

Every metric is a ratio of cluster sums (image unit) or a mean of cluster means (cluster unit), so its
linearised variance needs only the per-cluster sums the bootstrap starts from: `sql/estimates/delta_method.sql`
computes estimate, standard error and interval for every metric and both units in one query, with no
replicates (O(records) at any size, on any engine). Each row names its interval method, so rows of
several methods can sit in one table:

* `bootstrap_reference`, `bootstrap_evaluator`, `bootstrap_poisson`: percentile intervals of the
  whole-cluster bootstrap of that scheme (autheval.estimation.estimators);
* `delta_method`: estimate + t * se, t the Student t quantiles of the same levels with G - 1 degrees of
  freedom, G the clusters whose linearised residual can be non-zero (every cluster; for delta the clusters
  with a changed action): with few clusters the normal quantiles under-cover (benchmarks/small_sample_coverage.py). With
  G = 1 there is no interval (and no standard error). `distribution="normal"` gives the earlier
  estimate + z * se, for comparison;
* `clopper_pearson`: an intervention rate whose interval would be a single point (nothing changed,
  or everything) gets the exact interval instead (autheval.estimation.estimators.honest_small_sample).

A number the record level cannot support is not reported here either (the same availability rules), and
every row carries the small-sample columns of the bootstrap's rows (`support_clusters`, `warning`).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

import pyarrow as pa

from autheval.estimation.estimators import (
    AVAILABILITY_COLUMNS,
    DEFAULT_QUANTILES,
    EstimationResult,
    availability_columns,
    cluster_support,
    honest_small_sample,
    kept_values,
    metric_cells,
)
from autheval.estimation.exact import t_quantile
from autheval.records.cluster_stats import register_cluster_stats
from autheval.records.registration import register_records
from autheval.records.schema import RecordSet
from warehouse.sql import connect, load_sql

DELTA_METHOD = "delta_method"
INTERVAL_METHODS = (
    "bootstrap_reference",
    "bootstrap_evaluator",
    "bootstrap_poisson",
    "bootstrap_poisson_by_site",
    DELTA_METHOD,
)
INTERVAL_COLUMNS = (
    "analysis",
    "unit",
    "metric",
    "interval_method",
    "estimate",
    "std_error",
    "ci_lower",
    "ci_upper",
    *AVAILABILITY_COLUMNS,
)
DISTRIBUTIONS = ("t", "normal")  # the delta method's quantiles: Student t with G - 1 df (default), or normal


def bootstrap_method(scheme: str) -> str:
    """The interval method of a bootstrap scheme's rows."""
    method = f"bootstrap_{scheme}"
    if method not in INTERVAL_METHODS:
        raise ValueError(f"unknown scheme {scheme!r}")
    return method


def normal_quantiles(quantiles: tuple[float, float]) -> dict[str, float]:
    lower, upper = quantiles
    if not 0.0 < lower < upper < 1.0:
        raise ValueError("delta-method quantiles must satisfy 0 < lower < upper < 1")
    normal = NormalDist()
    return {"z_lower": normal.inv_cdf(lower), "z_upper": normal.inv_cdf(upper)}


def delta_interval(
    estimate: float | None,
    std_error: float | None,
    clusters: int,
    quantiles: tuple[float, float],
    distribution: str = "t",
) -> tuple[float | None, float | None, float | None]:
    """(std_error, ci_lower, ci_upper) of a delta-method row: estimate + q * se, q the Student t quantiles
    with clusters - 1 degrees of freedom (or the normal ones); all None where fewer than 2 clusters carry
    the metric (no variance can be estimated)."""
    if estimate is None or std_error is None or clusters < 2:
        return None, None, None
    if distribution == "normal":
        z = normal_quantiles(quantiles)
        q_lower, q_upper = z["z_lower"], z["z_upper"]
    else:
        q_lower, q_upper = t_quantile(quantiles[0], clusters - 1), t_quantile(quantiles[1], clusters - 1)
    return std_error, estimate + q_lower * std_error, estimate + q_upper * std_error


def delta_method_rows(
    recordsets: Sequence[RecordSet],
    quantiles: tuple[float, float] = DEFAULT_QUANTILES,
    engine=None,
    distribution: str = "t",
) -> list[dict]:
    """Delta-method rows (INTERVAL_COLUMNS) for every analysis, unit and metric, in the order of
    `recordsets`, UNITS and METRICS. `engine`: None or DuckDB runs here (over each record's
    statistics file, compensated sums: autheval/records/cluster_stats.py); another engine
    (warehouse.engine.Engine) runs portable_cluster_stats there. `distribution`: the quantiles of the
    interval, "t" (G - 1 degrees of freedom) or "normal"."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}: expected one of {', '.join(DISTRIBUTIONS)}")
    params = normal_quantiles(quantiles)
    con = connect(threads=1)  # same inputs, same bytes (warehouse.sql.connect)
    if engine is None or engine.kind == "duckdb":
        register_cluster_stats(con, recordsets)  # summed once, when the records were read
        cursor = con.execute(load_sql("estimates/delta_method"), params)
        names = [d[0] for d in cursor.description]
        computed = [dict(zip(names, row)) for row in cursor.fetchall()]
        support = cluster_support(con)
    else:
        from autheval.estimation.engine_estimates import records_on_engine

        register_records(con, recordsets)  # a dataset's files are scanned where they lie
        records_on_engine(engine, con, recordsets)  # Parquet datasets: the engine reads their files
        engine.create("cluster_stats", "records/portable_cluster_stats")
        computed = engine.read("estimates/delta_method", params).to_pylist()
        support = cluster_support(con, engine)
    by_key = {(r["analysis"], r["unit"], r["metric"]): r for r in computed}
    rows = []
    for records, unit, metric, row, avail in metric_cells(recordsets, by_key):
        counts = support.get(records.analysis, (records.n_clusters, records.n_clusters))
        kept = kept_values(row, avail, "estimate", "std_error")
        # degrees of freedom: the clusters whose residual can be non-zero (Y_c - R X_c): for delta those
        # with a change (X_c = Y_c = 0 elsewhere), for every other ratio all of them
        df_clusters = counts[1] if metric == "delta" else counts[0]
        se, lower, upper = delta_interval(kept["estimate"], kept["std_error"], df_clusters, quantiles, distribution)
        out = {
            "analysis": records.analysis,
            "unit": unit,
            "metric": metric,
            "interval_method": DELTA_METHOD,
            "estimate": kept["estimate"],
            "std_error": se,
            "ci_lower": lower,
            "ci_upper": upper,
            **availability_columns(records, avail),
        }
        rows.append(honest_small_sample(out, records, counts, quantiles))
    return rows


def bootstrap_rows(result: EstimationResult) -> list[dict]:
    """The bootstrap estimates of `result` in INTERVAL_COLUMNS, named by their scheme."""
    method = bootstrap_method(result.scheme)
    return [
        {
            **{c: row.get(c) for c in INTERVAL_COLUMNS},
            "interval_method": row.get("interval_method") or method,
            "std_error": None,
        }
        for row in result.estimates
    ]


def interval_table(result: EstimationResult, delta_rows: Sequence[dict]) -> pa.Table:
    """Bootstrap and delta-method rows in one long table, the interval method named in every row."""
    rows = bootstrap_rows(result) + list(delta_rows)
    return pa.Table.from_pylist([{c: r.get(c) for c in INTERVAL_COLUMNS} for r in rows])


def side_by_side(result: EstimationResult, delta_rows: Sequence[dict]) -> list[dict]:
    """Per analysis, unit and metric where both give an interval: the two intervals, the ratio of
    their widths (delta / bootstrap) and the largest shift of an end as a share of the bootstrap
    width (`end_shift`)."""
    by_key = {(r["analysis"], r["unit"], r["metric"]): r for r in delta_rows}
    out = []
    for boot in result.estimates:
        delta = by_key.get((boot["analysis"], boot["unit"], boot["metric"]))
        if not delta or boot["ci_lower"] is None or delta["ci_lower"] is None:
            continue
        width = boot["ci_upper"] - boot["ci_lower"]
        shift = max(abs(delta["ci_lower"] - boot["ci_lower"]), abs(delta["ci_upper"] - boot["ci_upper"]))
        out.append(
            {
                "analysis": boot["analysis"],
                "unit": boot["unit"],
                "metric": boot["metric"],
                "estimate": boot["estimate"],
                "bootstrap_lower": boot["ci_lower"],
                "bootstrap_upper": boot["ci_upper"],
                "delta_lower": delta["ci_lower"],
                "delta_upper": delta["ci_upper"],
                "width_ratio": (delta["ci_upper"] - delta["ci_lower"]) / width if width > 0 else None,
                "end_shift": shift / width if width > 0 else None,
            }
        )
    return out


def reference_comparison(reps: int = 5000) -> list[dict]:
    """Delta method vs the reference bootstrap on the six published reference traces (as in the
    README): side_by_side rows for every analysis, unit and metric both report."""
    from autheval.estimation.estimators import estimate
    from autheval.records.read import read_records
    from autheval.reference_data import REFERENCE_ANALYSES, reference_path

    recordsets = [read_records(reference_path(trace), analysis=name) for name, *_, trace in REFERENCE_ANALYSES]
    result = estimate(recordsets, scheme="reference", reps=reps)
    return side_by_side(result, delta_method_rows(recordsets))


def main() -> None:
    """Print the README's comparison table (markdown)."""
    print(
        "| analysis | unit | metric | estimate | bootstrap_reference 95% | delta_method 95% | width ratio | end shift |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in reference_comparison():
        print(
            f"| {r['analysis']} | {r['unit']} | {r['metric']} | {r['estimate']:.4f} | "
            f"[{r['bootstrap_lower']:.4f}, {r['bootstrap_upper']:.4f}] | "
            f"[{r['delta_lower']:.4f}, {r['delta_upper']:.4f}] | {r['width_ratio']:.3f} | {r['end_shift']:.3f} |"
        )


if __name__ == "__main__":
    main()
