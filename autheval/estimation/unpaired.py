"""Unpaired comparisons: two record sets that share no clusters (a service that moved from v1 to v2).

A paired contrast (autheval.estimation.estimators) resamples the same clusters in both arms; here the arms
are independent samples of clusters, so each arm is resampled on its own:

* **cells.** Without strata an arm is one cell; with strata (`strata=("site", "risk_stratum")`) each arm's
  rows are split by the strata columns' values and every (arm, stratum) is a cell. Clusters are resampled
  whole within their cell: a cluster (keyed by `site` and `cluster_id` where a `site` column exists) in
  two strata is refused, and so is a stratum that only one arm of a contrast has.
* **seeds.** Cell k (k = arm number x strata + stratum number; arms in the order given, strata in sorted
  order) draws the scheme's stream with seed `(seed + SEED_STRIDE * k) mod 2^62`: cell 0 is the first
  arm's own bootstrap (`autheval evaluate` of it with the same seed), and no two cells share draws (the
  evaluator scheme's per-metric offsets are below SEED_STRIDE).
* **the difference.** An arm's value is sum_s w_s M_s over its strata (M_s the metric of its stratum s),
  w_s the stratum's pooled share in both arms of the unit's weight: images for `image_weighted`,
  clusters for `cluster_equal` (declared in each row, `strata_weights`); one stratum: w = 1, the arm's
  metric. Bootstrap (`interval_method` bootstrap_<scheme>): replicate r of the difference is arm a's
  replicate r minus arm b's (independent draws); percentile interval and the p-value of the paired
  contrasts (twice the smaller tail share around 0, with the Monte Carlo +1), in
  sql/estimates/unpaired_contrast.sql. Delta method (`delta_method`): the variances of independent
  samples add, se^2 = sum over both arms' cells of w_s^2 se_s^2 (se_s of sql/estimates/delta_method.sql),
  the interval difference + t se with the Welch-Satterthwaite degrees of freedom
  (se^2)^2 / sum_s (w_s^2 se_s^2)^2 / (G_s - 1), G_s a cell's clusters (for delta: those with a change).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from autheval.errors import RecordError
from autheval.estimation.estimators import (
    DEFAULT_SEEDS,
    METRICS,
    MIN_CLUSTERS,
    UNITS,
    _replicate_metrics,
    _unsupported,
    availability,
    check_reps,
)
from autheval.estimation.exact import beta_inc, t_quantile
from autheval.records.cluster_stats import register_cluster_stats
from autheval.records.registration import register_records
from autheval.records.schema import RecordSet
from autheval.vocabulary import name_problem
from warehouse import sql
from warehouse.sql import connect

SEED_STRIDE = 1000
SEED_MODULUS = 1 << 62
UNPAIRED_FILE = "unpaired_contrast.csv"
STRATA_WEIGHTS = "pooled share of images (image_weighted) or clusters (cluster_equal) in both arms"
UNPAIRED_COLUMNS = (
    "contrast",
    "arm_a",
    "arm_b",
    "unit",
    "metric",
    "interval_method",
    "difference",
    "std_error",
    "ci_lower",
    "ci_upper",
    "p_value",
    "excludes_zero",
    "scheme",
    "reps",
    "seed",
    "seeds_a",
    "seeds_b",
    "strata",
    "n_strata",
    "strata_weights",
    "n_clusters_a",
    "n_clusters_b",
    "n_cases_a",
    "n_cases_b",
    "reps_undefined",
    "quantile_lower",
    "quantile_upper",
    "available",
    "reason",
    "warning",
)


def cell_seed(seed: int, cell: int) -> int:
    """The bootstrap seed of cell number `cell` (module docstring)."""
    return (int(seed) + SEED_STRIDE * cell) % SEED_MODULUS


def group_values(table: pa.Table, columns: Sequence[str], source: str, flag: str) -> list[tuple[str, ...]]:
    """Each row's values of `columns` (checked: present, text that can name a group) as tuples."""
    for column in columns:
        if column not in table.column_names:
            raise RecordError(flag, column, f"no such column in {source} (columns: {', '.join(table.column_names)})")
    values = []
    for column in columns:
        col = table.column(column)
        texts = col.to_pylist() if col.type == pa.string() else col.cast(pa.string()).to_pylist()
        for row, value in enumerate(texts):
            problem = "is empty" if value is None else name_problem(value)
            if problem:
                raise RecordError(
                    source,
                    column,
                    f"a {flag} value {problem}: every row needs a value that names its group",
                    f"row {row + 1}, value {value!r}",
                )
        values.append(texts)
    return list(zip(*values))


def split_groups(table: pa.Table, columns: Sequence[str], source: str, flag: str) -> dict[tuple[str, ...], pa.Table]:
    """The rows of `table` by their values of `columns` (sorted by value), each subset in row order."""
    import numpy as np

    keys = group_values(table, columns, source, flag)
    order: dict[tuple[str, ...], list[int]] = {}
    for i, key in enumerate(keys):
        order.setdefault(key, []).append(i)
    return {key: table.take(pa.array(np.asarray(order[key], dtype=np.int64))) for key in sorted(order)}


def group_label(columns: Sequence[str], key: Sequence[str]) -> str:
    return ",".join(f"{c}={v}" for c, v in zip(columns, key))


def check_strata_clusters(table: pa.Table, strata: Sequence[str], source: str) -> None:
    """A cluster lies in one stratum: clusters are keyed by (site, cluster_id) where a site column exists."""
    cluster = "cluster_id" if "cluster_id" in table.column_names else "case_id"
    key_columns = (["site"] if "site" in table.column_names else []) + [cluster]
    clusters = [tuple(map(str, k)) for k in zip(*(table.column(c).to_pylist() for c in key_columns))]
    strata_of = list(zip(*(table.column(c).cast(pa.string()).to_pylist() for c in strata)))
    seen: dict[tuple[str, ...], tuple] = {}
    for row, (key, stratum) in enumerate(zip(clusters, strata_of)):
        first = seen.setdefault(key, stratum)
        if first != stratum:
            raise RecordError(
                source,
                cluster,
                "a cluster lies in two strata: a stratified bootstrap resamples whole clusters within a stratum",
                f"row {row + 1}, cluster {key[-1]!r}: {group_label(strata, first)} and {group_label(strata, stratum)}",
            )


def _cell_replicates(records: RecordSet, scheme: str, reps: int, seed: int) -> tuple[pa.Table, list[dict], dict]:
    """One cell's replicate_metrics (rep -1: the point), its delta-method rows and (clusters, changed)."""
    from autheval.estimation.bootstrap import one_blas_thread

    con = connect(threads=1)
    register_records(con, [records])
    register_cluster_stats(con, [records])
    with one_blas_thread():
        _replicate_metrics(
            con, scheme, reps, seed, _unsupported({records.analysis: records}), None, {records.analysis: records}
        )
    table = con.table("replicate_metrics").arrow()
    table = table.read_all() if hasattr(table, "read_all") else table
    delta = sql.rows(con, "estimates/delta_method", {"z_lower": 0.0, "z_upper": 0.0})
    support = sql.rows(con, "estimates/cluster_support")[0]
    con.close()
    return table, delta, support


def unpaired_contrasts(
    arms: Sequence[tuple[str, Sequence[tuple[tuple[str, ...], RecordSet]]]],
    contrasts: Sequence[tuple[str, str]],
    scheme: str,
    reps: int,
    seed: int | None,
    quantiles: tuple[float, float],
    strata: Sequence[str] = (),
) -> list[dict]:
    """The unpaired contrast rows (UNPAIRED_COLUMNS) of `contrasts` ("A minus B" as (A, B)) between
    `arms`: (name, [(stratum key, its records)]), one cell per stratum ((), records without strata)."""
    reps = check_reps(reps)
    seed = DEFAULT_SEEDS[scheme] if seed is None else int(seed)
    lower, upper = quantiles
    names = [name for name, _ in arms]
    by_name = dict(arms)
    for a, b in contrasts:
        for arm in (a, b):
            if arm not in by_name:
                raise RecordError("--contrast", None, f"unknown arm {arm!r} (arms: {', '.join(names)})")
        missing = sorted({k for k, _ in by_name[a]} ^ {k for k, _ in by_name[b]})
        if missing:
            side = a if missing[0] in {k for k, _ in by_name[a]} else b
            raise RecordError(
                "--strata",
                ",".join(strata),
                f"stratum {group_label(strata, missing[0])} has records in arm {side!r} only: a stratified "
                f"contrast needs every stratum in both arms ({a} minus {b})",
            )
    n_strata = max(len(cells) for _, cells in arms)
    replicate_parts: list[pa.Table] = []
    cells_info: dict[tuple[str, str], dict[str, Any]] = {}
    for i, (arm, cells) in enumerate(arms):
        for j, (key, records) in enumerate(cells):
            s = cell_seed(seed, i * n_strata + j)
            table, delta, support = _cell_replicates(records, scheme, reps, s)
            label = group_label(strata, key)
            table = table.drop_columns(["analysis"])
            table = table.append_column("arm", pa.array([arm] * table.num_rows, pa.string()))
            table = table.append_column("stratum", pa.array([label] * table.num_rows, pa.string()))
            replicate_parts.append(table)
            cells_info[(arm, label)] = {
                "records": records,
                "seed": s,
                "clusters": int(support["n_clusters"]),
                "changed": int(support["changed_clusters"] or 0),
                "delta": {(r["unit"], r["metric"]): r for r in delta},
            }
    long = []
    for part in replicate_parts:
        for metric in METRICS:
            long.append(
                pa.table(
                    {
                        "arm": part.column("arm"),
                        "stratum": part.column("stratum"),
                        "rep": part.column("rep").cast(pa.int64()),
                        "unit": part.column("unit"),
                        "metric": pa.array([metric] * part.num_rows, pa.string()),
                        "value": part.column(metric).cast(pa.float64()),
                    }
                )
            )
    weights, pairs = [], []
    for a, b in contrasts:
        contrast = f"{a} minus {b}"
        pairs.append({"contrast": contrast, "arm_a": a, "arm_b": b})
        weights += _weights(contrast, a, b, cells_info, strata)
    con = connect(threads=1)
    con.register("unpaired_replicates", pa.concat_tables(long))
    con.register("unpaired_weights", pa.Table.from_pylist(weights))
    con.register("unpaired_pairs", pa.Table.from_pylist(pairs))
    computed = {
        (r["contrast"], r["unit"], r["metric"]): r
        for r in sql.rows(con, "estimates/unpaired_contrast", {"lower": lower, "upper": upper})
    }
    con.close()
    rows = []
    for a, b in contrasts:
        contrast = f"{a} minus {b}"
        cells_a = [cells_info[(a, group_label(strata, k))] for k, _ in by_name[a]]
        cells_b = [cells_info[(b, group_label(strata, k))] for k, _ in by_name[b]]
        base = {
            "contrast": contrast,
            "arm_a": a,
            "arm_b": b,
            "scheme": scheme,
            "reps": reps,
            "seed": seed,
            "seeds_a": " ".join(str(c["seed"]) for c in cells_a),
            "seeds_b": " ".join(str(c["seed"]) for c in cells_b),
            "strata": ",".join(strata) if strata else "none",
            "n_strata": len(cells_a),
            "strata_weights": STRATA_WEIGHTS if strata else "none (one stratum, weight 1)",
            "n_clusters_a": sum(c["clusters"] for c in cells_a),
            "n_clusters_b": sum(c["clusters"] for c in cells_b),
            "n_cases_a": sum(c["records"].n_cases for c in cells_a),
            "n_cases_b": sum(c["records"].n_cases for c in cells_b),
            "quantile_lower": lower,
            "quantile_upper": upper,
        }
        few = [c for c in cells_a + cells_b if c["clusters"] < MIN_CLUSTERS]
        warning = (
            f"few clusters ({min(c['clusters'] for c in few)} in a cell; the threshold is {MIN_CLUSTERS}): "
            "intervals may cover less than their level"
            if few
            else None
        )
        w = {(r["unit"], r["arm"], r["stratum"]): r["weight"] for r in weights if r["contrast"] == contrast}
        for unit in UNITS:
            for metric in METRICS:
                reason = next(
                    (
                        f"{c['records'].source}: {availability(c['records'], metric).reason}"
                        for c in cells_a + cells_b
                        if not availability(c["records"], metric).available
                    ),
                    None,
                )
                common = {**base, "unit": unit, "metric": metric, "available": reason is None, "reason": reason}
                boot = computed.get((contrast, unit, metric), {}) if reason is None else {}
                rows.append(
                    {
                        **common,
                        "interval_method": f"bootstrap_{scheme}",
                        "difference": boot.get("difference"),
                        "ci_lower": boot.get("ci_lower"),
                        "ci_upper": boot.get("ci_upper"),
                        "p_value": boot.get("p_value"),
                        "reps_undefined": boot.get("reps_undefined"),
                        "warning": warning,
                    }
                )
                rows.append(
                    {
                        **common,
                        "interval_method": "delta_method",
                        **(
                            _delta_row(unit, metric, a, b, cells_info, w, strata, by_name, quantiles)
                            if reason is None
                            else {}
                        ),
                        "warning": warning,
                    }
                )
    for row in rows:
        lo, hi = row.get("ci_lower"), row.get("ci_upper")
        row["excludes_zero"] = None if lo is None or hi is None else bool(lo > 0 or hi < 0)
    return rows


def _weights(contrast: str, a: str, b: str, cells: dict, strata: Sequence[str]) -> list[dict]:
    """unpaired_weights rows of one contrast: each stratum's pooled share of images or clusters."""
    labels = sorted({s for arm, s in cells if arm in (a, b)})
    rows = []
    for unit in UNITS:
        size = {
            s: sum(
                (cells[(arm, s)]["records"].n_cases if unit == "image_weighted" else cells[(arm, s)]["clusters"])
                for arm in (a, b)
            )
            for s in labels
        }
        total = sum(size.values())
        for arm in (a, b):
            for s in labels:
                weight = 1.0 if len(labels) == 1 else size[s] / total
                rows.append({"contrast": contrast, "unit": unit, "arm": arm, "stratum": s, "weight": weight})
    return rows


def _delta_row(unit, metric, a, b, cells, w, strata, by_name, quantiles) -> dict:
    """The delta-method difference, its standard error (variances of independent samples add), the
    Welch-Satterthwaite t interval and its two-sided p-value."""
    difference, variance, denominator = 0.0, 0.0, 0.0
    for sign, arm in ((1.0, a), (-1.0, b)):
        for key, _ in by_name[arm]:
            label = group_label(strata, key)
            cell = cells[(arm, label)]
            row = cell["delta"].get((unit, metric))
            weight = w[(unit, arm, label)]
            if row is None or row["estimate"] is None or row["std_error"] is None:
                return {}
            g = cell["changed"] if metric == "delta" else cell["clusters"]
            part = (weight * row["std_error"]) ** 2
            difference += sign * weight * row["estimate"]
            variance += part
            if g < 2:
                return {"difference": difference}
            denominator += part**2 / (g - 1)
    se = math.sqrt(variance)
    out = {"difference": difference, "std_error": se}
    if se == 0.0 or denominator == 0.0:
        return out
    df = variance**2 / denominator
    lower, upper = quantiles
    if 0.0 < lower < upper < 1.0:
        out["ci_lower"] = difference + t_quantile(lower, df) * se
        out["ci_upper"] = difference + t_quantile(upper, df) * se
    t = abs(difference) / se
    out["p_value"] = min(1.0, beta_inc(df / 2.0, 0.5, df / (df + t * t)))
    return out
