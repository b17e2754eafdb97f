"""Result tables with a fixed Arrow schema, as the lake stores them (estimates, contrasts).

These functions know nothing of Dagster; the lake's estimate and trend assets call them.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.estimation.estimators import EstimationResult
from autheval.reporting.outputs import CONTRAST_COLUMNS, ESTIMATE_COLUMNS, estimate_rows

_TYPES = {
    "analysis": pa.string(), "unit": pa.string(), "metric": pa.string(), "contrast": pa.string(),
    "status": pa.string(), "reason": pa.string(), "scheme": pa.string(), "interval_method": pa.string(),
    "record_level": pa.string(),
    "source": pa.string(), "data_sha256": pa.string(), "model": pa.string(), "available": pa.bool_(),
    "excludes_zero": pa.bool_(), "n": pa.int64(), "n_clusters": pa.int64(), "reps": pa.int64(),
    "seed": pa.int64(), "excludes_zero_adjusted": pa.bool_(), "adjustment": pa.string(), "family": pa.string(),
    "family_size": pa.int64(), "arm_a": pa.string(), "arm_b": pa.string(),
}  # fmt: skip


def _table(columns, rows) -> pa.Table:
    """Rows as an Arrow table with a fixed schema (numbers not named above are doubles)."""
    schema = pa.schema([(c, _TYPES.get(c, pa.float64())) for c in columns])
    return pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)


def estimates_table(result: EstimationResult | None, model: str | dict[str, str] = "") -> pa.Table:
    """The estimates of `result` (None: an empty table with the estimates' schema)."""
    return _table(ESTIMATE_COLUMNS, [] if result is None else estimate_rows(result, model))


def contrasts_table(result: EstimationResult | None) -> pa.Table:
    """The paired contrasts of `result` (None: an empty table with the contrasts' schema)."""
    rows = [] if result is None else [{**c, "scheme": result.scheme, "reps": result.reps, "seed": result.seed}
                                      for c in result.contrasts]
    return _table((*CONTRAST_COLUMNS[:1], "arm_a", "arm_b", *CONTRAST_COLUMNS[1:], "scheme", "reps", "seed"), rows)
