"""Result tables with a fixed schema, as the lake stores them and the result files write them
(estimates, contrasts): their columns, the rows with their provenance, and the Arrow tables.

These functions know nothing of Dagster; the lake's estimate and trend assets call them.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.columns import COLUMN_TYPES
from autheval.estimation.estimators import AVAILABILITY_COLUMNS, METRICS, EstimationResult
from autheval.estimation.multiplicity import ADJUSTED_COLUMNS

CONTRAST_COLUMNS = ("contrast", "unit", "difference", "ci_lower", "ci_upper", "excludes_zero", *ADJUSTED_COLUMNS)
ESTIMATE_COLUMNS = (
    "analysis",
    "unit",
    "metric",
    "estimate",
    "ci_lower",
    "ci_upper",
    "p_value",
    "n",
    *AVAILABILITY_COLUMNS,
    "scheme",
    "interval_method",
    "reps",
    "seed",
    "quantile_lower",
    "quantile_upper",
    "record_level",
    "source",
    "data_sha256",
    "model",
)


def metric_seed(result: EstimationResult, metric: str) -> int:
    """The stream seed behind a metric's interval (the evaluator scheme offsets it per metric)."""
    return result.seed + METRICS.index(metric) if result.scheme == "evaluator" else result.seed


def estimate_rows(result: EstimationResult, model: str | dict[str, str] = "") -> list[dict]:
    """The long estimates table with its provenance on every row (`model`: one name for all
    analyses, or the proposal mechanism per analysis)."""
    rows = []
    for row in result.estimates:
        records = result.records[row["analysis"]]
        rows.append(
            {
                **row,
                "scheme": result.scheme,
                # the scheme's bootstrap, or clopper_pearson where a rate's interval was a point (estimators.py);
                # autheval.estimation.analytic names the delta method's
                "interval_method": row.get("interval_method") or f"bootstrap_{result.scheme}",
                "reps": result.reps,
                "seed": metric_seed(result, row["metric"]),
                "quantile_lower": result.quantiles[0],
                "quantile_upper": result.quantiles[1],
                "record_level": records.level,
                "source": records.source,
                "data_sha256": records.data_sha256,
                "model": model.get(row["analysis"], "") if isinstance(model, dict) else model,
            }
        )
    return rows


def _table(columns, rows) -> pa.Table:
    """Rows as an Arrow table with a fixed schema: each column of its type in autheval.columns, a number
    named nowhere there (difference, quantile_lower, p_adjusted, ...) a double."""
    schema = pa.schema([(c, COLUMN_TYPES.get(c, pa.float64())) for c in columns])
    return pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)


def estimates_table(result: EstimationResult | None, model: str | dict[str, str] = "") -> pa.Table:
    """The estimates of `result` (None: an empty table with the estimates' schema)."""
    return _table(ESTIMATE_COLUMNS, [] if result is None else estimate_rows(result, model))


def contrasts_table(result: EstimationResult | None) -> pa.Table:
    """The paired contrasts of `result` (None: an empty table with the contrasts' schema)."""
    rows = (
        []
        if result is None
        else [{**c, "scheme": result.scheme, "reps": result.reps, "seed": result.seed} for c in result.contrasts]
    )
    return _table((*CONTRAST_COLUMNS[:1], "arm_a", "arm_b", *CONTRAST_COLUMNS[1:], "scheme", "reps", "seed"), rows)
