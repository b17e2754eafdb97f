"""The reference study (AuthEval on ISIC 2019) from the embedded traces: three review regimes of the
MedGemma readout and three proposal mechanisms under capacity, with the published paired contrast.

These functions are what the demo and the lake's estimate assets call; they know nothing of Dagster.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.estimators import DEFAULT_REPS, EstimationResult, estimate
from autheval.outputs import CONTRAST_COLUMNS, ESTIMATE_COLUMNS, PROPOSAL_COLUMNS, estimate_rows, proposal_rows
from autheval.records import RecordSet, file_sha256, read_records
from autheval.reference_data import MECHANISMS, PUBLISHED_CONTRAST, REGIMES, reference_path


def reference_recordsets(names: dict[str, str]) -> list[RecordSet]:
    return [read_records(reference_path(table), analysis=label) for label, table in names.items()]


def regime_study(reps: int = DEFAULT_REPS, seed: int | None = None) -> EstimationResult:
    return estimate(reference_recordsets(REGIMES), scheme="reference", reps=reps, seed=seed)


def mechanism_study(reps: int = DEFAULT_REPS, seed: int | None = None) -> EstimationResult:
    return estimate(
        reference_recordsets(MECHANISMS), scheme="reference", reps=reps, seed=seed,
        contrasts=[PUBLISHED_CONTRAST],
    )


_TYPES = {
    "analysis": pa.string(), "unit": pa.string(), "metric": pa.string(), "proposal": pa.string(),
    "contrast": pa.string(), "status": pa.string(), "reason": pa.string(), "scheme": pa.string(),
    "record_level": pa.string(), "source": pa.string(), "data_sha256": pa.string(),
    "model": pa.string(), "available": pa.bool_(), "excludes_zero": pa.bool_(),
    "n": pa.int64(), "n_clusters": pa.int64(), "n_images": pa.int64(), "reps": pa.int64(),
    "seed": pa.int64(),
}  # fmt: skip


def _table(columns, rows) -> pa.Table:
    """Rows as an Arrow table with a fixed schema (numbers not named above are doubles)."""
    schema = pa.schema([(c, _TYPES.get(c, pa.float64())) for c in columns])
    return pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)


def estimates_table(result: EstimationResult, model: str = "") -> pa.Table:
    return _table(ESTIMATE_COLUMNS, estimate_rows(result, model))


def proposal_table(result: EstimationResult) -> pa.Table:
    return _table(PROPOSAL_COLUMNS, proposal_rows(result))


def contrasts_table(result: EstimationResult) -> pa.Table:
    rows = [
        {**c, "scheme": result.scheme, "reps": result.reps, "seed": result.seed}
        for c in result.contrasts
    ]
    return _table((*CONTRAST_COLUMNS, "scheme", "reps", "seed"), rows)


def reference_sha256(table: str) -> str:
    return file_sha256(reference_path(table))
