"""Many comparisons: multiplicity-adjusted p-values beside the raw ones, over a family named in the row.

Every pair of seven mechanisms in three regimes is 126 contrast rows; flagged each on its own at 5%, a
handful exclude zero by chance alone. So each tested row keeps its raw interval and raw flag
(`excludes_zero`) and carries, beside them:

* `p_value`: the bootstrap p-value of "no difference" (sql/estimates/intervals.sql, sql/estimates/paired_contrast.sql):
  min(1, 2 (1 + min(#{d* <= 0}, #{d* >= 0})) / (B + 1)) over the B defined replicates, the p-value
  the equal-tailed percentile interval inverts, never 0;
* `p_adjusted`: Holm's step-down adjusted p-value over the row's `family` (family-wise error; no
  assumption on how the tests depend on each other, which matters here: contrasts share arms and
  resamples); `adjustment` = 'holm';
* `q_value`: the Benjamini-Hochberg q-value over the same family (false discovery rate), for readers
  who screen rather than claim;
* `family`, `family_size`: the declared family and its number of tests m;
* `excludes_zero_adjusted`: p_adjusted < alpha, alpha = 1 - (upper - lower) the intervals' level. This
  is the headline flag (the report shows it); it implies the raw flag.

Families: contrasts, every contrast of one `estimate` call (a study: one regime of a cohort) in one
unit; subgroups, every estimable group of every grouping of one analysis, per unit and metric. Only
the gap metrics are tested (TESTED_METRICS: zero means no difference there). The adjustments are SQL
(sql/estimates/multiplicity.sql), set-based over all families at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from warehouse.sql import connect, load_sql

ADJUSTMENT = "holm"
TESTED_METRICS = ("Delta_authority", "delta", "Delta_total", "Delta_utility")
ADJUSTED_COLUMNS = ("p_value", "p_adjusted", "q_value", "adjustment", "family", "family_size", "excludes_zero_adjusted")
DEFAULT_CONTRAST_FAMILY = "contrasts"
DEFAULT_QUANTILES = (0.025, 0.975)  # the reported interval: 2.5% and 97.5% quantiles


def alpha_of(quantiles: tuple[float, float]) -> float:
    """The error rate of the intervals' level (rounded, so 0.025/0.975 gives exactly 0.05)."""
    lower, upper = quantiles
    return round(1.0 - (upper - lower), 12)


def contrast_family(label: str, unit: str) -> str:
    return f"{label} / {unit}"


def subgroup_family(analysis: str, unit: str, metric: str) -> str:
    return f"subgroups of {analysis} / {unit} / {metric}"


def adjust(families: Sequence[str | None], p_values: Sequence[float | None], con=None) -> list[dict]:
    """Per row, in order: family_size, p_adjusted (Holm) and q_value (BH) over the rows of its family;
    all None where the row has no p-value or no family."""
    tested = pa.table(
        {
            "row_id": pa.array(range(len(p_values)), pa.int64()),
            "family": pa.array(list(families), pa.string()),
            "p_value": pa.array([None if f is None else p for f, p in zip(families, p_values)], pa.float64()),
        }
    )
    con = con or connect(threads=1)
    con.register("tested", tested)
    try:
        found = {r[0]: r[1:] for r in con.execute(load_sql("estimates/multiplicity")).fetchall()}
    finally:
        con.unregister("tested")
    empty = (None, None, None)
    return [dict(zip(("family_size", "p_adjusted", "q_value"), found.get(i, empty))) for i in range(len(p_values))]


def add_adjusted_columns(
    rows: list[dict], families: Sequence[str | None], quantiles: tuple[float, float], con=None
) -> None:
    """Add ADJUSTED_COLUMNS to each row (which holds its `p_value`; None: not tested)."""
    alpha = alpha_of(quantiles)
    families = [f if r.get("p_value") is not None else None for r, f in zip(rows, families)]
    for row, family, adjusted in zip(rows, families, adjust(families, [r.get("p_value") for r in rows], con)):
        row.update(adjusted)
        row["adjustment"] = ADJUSTMENT if family is not None else None
        row["family"] = family
        row["excludes_zero_adjusted"] = None if family is None else bool(adjusted["p_adjusted"] < alpha)


def adjust_subgroups(subgroups: pa.Table, quantiles: tuple[float, float] | None = None) -> pa.Table:
    """The subgroups table with `excludes_zero` (the raw interval) and ADJUSTED_COLUMNS for the tested
    metrics, each family every estimable group of one analysis in one unit and metric."""
    if quantiles is None:
        quantiles = DEFAULT_QUANTILES
    rows = subgroups.select(
        [c for c in ("analysis", "unit", "metric", "ci_lower", "ci_upper", "p_value") if c in subgroups.column_names]
    ).to_pylist()
    families = []
    for r in rows:
        tested = r.get("metric") in TESTED_METRICS and r.get("p_value") is not None
        families.append(subgroup_family(r["analysis"], r["unit"], r["metric"]) if tested else None)
        r["excludes_zero"] = (
            bool(r["ci_lower"] > 0 or r["ci_upper"] < 0) if tested and r["ci_lower"] is not None else None
        )
    add_adjusted_columns(rows, families, quantiles)
    added = [c for c in ("excludes_zero", *ADJUSTED_COLUMNS) if c not in subgroups.column_names or c != "p_value"]
    out = subgroups.drop_columns([c for c in added if c in subgroups.column_names])
    types = {
        "family_size": pa.int64(),
        "adjustment": pa.string(),
        "family": pa.string(),
        "excludes_zero_adjusted": pa.bool_(),
        "excludes_zero": pa.bool_(),
    }
    for name in added:  # p_value stays where the subgroups table has it (beside the interval)
        out = out.append_column(name, pa.array([r.get(name) for r in rows], types.get(name, pa.float64())))
    return out


def flagged(table: pa.Table, adjusted: bool = True) -> int:
    """How many rows a flag marks (the adjusted one by default)."""
    column = "excludes_zero_adjusted" if adjusted else "excludes_zero"
    return sum(1 for flag in table.column(column).to_pylist() if flag)  # no pyarrow.compute: a slow import
