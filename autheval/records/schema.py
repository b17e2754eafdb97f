"""The record schemas and levels: RecordSet, the log and trace columns, the type rules and column mapping.

What a record is, apart from how it is read: the two accepted input schemas (the AuthEval log and
case-trace columns) and their canonical names, the record levels FULL, ROLE_SEPARATED and
PROPOSAL_ONLY, the column type rules, and `column_mapping` / `canonical_columns`, which check a header
(duplicates, a misspelling, a missing column, a type the record cannot mean) and map it to the log's
column names. The readers (autheval/records/read.py, datasets.py) and the estimators build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from autheval.errors import RecordError
from autheval.records.cluster_stats import ClusterStatsFile
from autheval.records.registration import register_records
from autheval.vocabulary import LOG_COLUMNS
from warehouse.sql import connect

if TYPE_CHECKING:
    from autheval.records.datasets import RecordDataset

LOG_REQUIRED = ("case_id", "proposed_action", "executed_action", "utility_executed_local")
TRACE_TO_LOG = {
    "image_id": "case_id",
    "cluster_id": "cluster_id",
    "a_head": "proposed_action",
    "a_exec": "executed_action",
    "Uz_exec": "utility_executed_local",
    "Uz_head": "utility_proposed_local",
    "Ug_head": "utility_proposed_global",
}
TRACE_REQUIRED = ("image_id", "cluster_id", "a_head", "a_exec", "Uz_head", "Uz_exec")
# Columns of AuthEval's case traces that the estimators recompute from the others (or do not need):
# known, so neither a near-miss of a name we use nor worth a warning.
TRACE_DERIVED = ("policy_id", "slate_size", "intervention_type", "intervened", "delta_authority_i", "delta_utility_i")
MAX_EDITS = 2  # an unused column this close to a known name is a misspelling, not an extra column

# Record levels (what a record can support) and the generic evaluator's mode names.
FULL = "full_counterfactual"
ROLE_SEPARATED = "role_separated"
PROPOSAL_ONLY = "proposal_only"

TEXT_ROLE_COLUMNS = ("case_id", "cluster_id", "proposed_action", "executed_action")  # canonical names
NUMBER_ROLE_COLUMNS = ("utility_executed_local", "utility_proposed_local", "utility_proposed_global")

TEXT_COLUMNS = ("case_id", "cluster_id", "proposed_action", "executed_action")
CANONICAL_COLUMNS = (
    "analysis",
    "row_index",
    *TEXT_COLUMNS,
    "intervened",
    "utility_executed_local",
    "utility_proposed_local",
    "utility_proposed_global",
)


@dataclass(frozen=True)
class RecordSet:
    """A validated record in canonical columns, with what it can support."""

    analysis: str
    source: str
    schema: str  # 'log' or 'trace'
    level: str  # FULL, ROLE_SEPARATED or PROPOSAL_ONLY
    has_local: bool  # the proposal's local score is known on every changed case
    has_global: bool  # the proposal's global (benchmark) score is given
    n_cases: int
    n_clusters: int
    n_changed: int
    data_sha256: str
    rows: pa.Table | None  # the canonical rows when they are held here (records_from_table), else None
    unused_columns: tuple[str, ...] = ()  # input columns no estimator reads (listed as a warning)
    n_local: int = 0  # rows with utility_proposed_local: a gap it cannot support says whether it was given at all
    dataset: RecordDataset | None = None  # the files the rows are read from, where they lie
    # its per-cluster sufficient statistics, summed once when it is read (autheval/records/cluster_stats.py)
    cluster_stats: ClusterStatsFile | None = field(default=None, compare=False, repr=False)

    @property
    def table(self) -> pa.Table:
        """The canonical rows as one Arrow table: the held ones, or a dataset's read whole into this
        process now (for small records and tests; the estimators never ask for it, they scan the
        dataset: `register_records`)."""
        if self.rows is not None:
            return self.rows
        con = connect(threads=1)
        register_records(con, [self])
        return con.table("records").arrow().read_all()

    @property
    def mode(self) -> str:
        """The generic evaluator's mode name."""
        if self.level == PROPOSAL_ONLY:
            return "proposal_only"
        if self.has_local:
            return "full"
        return "observable_plus_global" if self.has_global else "observable_only"


def edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (optimal string alignment: insertions, deletions, substitutions
    and transpositions of adjacent characters, each one edit)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def closest_name(name: str, candidates) -> str | None:
    """The candidate within MAX_EDITS edits of `name` (compared case-insensitively), nearest first."""
    scored = sorted((edit_distance(name.lower(), c.lower()), i, c) for i, c in enumerate(candidates))
    return scored[0][2] if scored and scored[0][0] <= MAX_EDITS else None


def header_names(table: pa.Table, source: str) -> pa.Table:
    """Column names without surrounding spaces; a name given twice is an error."""
    names = [name.strip() for name in table.column_names]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RecordError(source, name, "the header names this column more than once (duplicate column)")
        seen.add(name)
    return table.rename_columns(names) if names != table.column_names else table


def is_text_type(kind: pa.DataType) -> bool:
    """Arrow text: string, large string, string view, or a dictionary of one of them."""
    if pa.types.is_dictionary(kind):
        return is_text_type(kind.value_type)
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def is_text_column(kind: pa.DataType) -> bool:
    """A column that holds text or integer ids (Parquet's strings, dictionaries of strings, integers)."""
    if pa.types.is_dictionary(kind):
        return is_text_column(kind.value_type)
    return is_text_type(kind) or pa.types.is_integer(kind) or pa.types.is_null(kind)


def is_number_column(kind: pa.DataType) -> bool:
    """A column that holds numbers the engine reads exactly: float32/float64, integers, decimals, or
    text (a CSV's cells, named when they do not parse). float16 is not one (DuckDB cannot read it)."""
    if pa.types.is_dictionary(kind):
        return is_number_column(kind.value_type)
    return (
        pa.types.is_float32(kind)
        or pa.types.is_float64(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_decimal(kind)
        or is_text_type(kind)
        or pa.types.is_null(kind)
    )


TEXT_TYPE_RULE = "must be a text column (strings, or integer ids)"
NUMBER_TYPE_RULE = "must be a number column (float32 or float64, an integer or a decimal) or text"


def check_column_types(table: pa.Table, source: str, text=(), numbers=()) -> None:
    """One RecordError line for the first column of `text` or `numbers` (those present) whose Parquet
    type is not a supported one: a struct, list, binary, boolean, float16... column, named with its
    type, before any engine meets it."""
    for name in table.column_names:
        kind = table.schema.field(name).type
        if name in text and not is_text_column(kind):
            raise RecordError(source, name, f"{TEXT_TYPE_RULE}; got {kind}")
        if name in numbers and not is_number_column(kind):
            raise RecordError(source, name, f"{NUMBER_TYPE_RULE}; got {kind}")


def _misspelling(source: str, unused, known) -> None:
    """An unused column within MAX_EDITS of a known name that is absent is a misspelling: an error."""
    for name in unused:
        guess = closest_name(name, known)
        if guess is not None:
            raise RecordError(source, name, f"unknown column; did you mean {guess!r}? (it would be ignored)")


def canonical_columns(table: pa.Table, source: str, used: tuple[str, ...] = ()) -> tuple[str, pa.Table]:
    """Detect the schema from the columns and return (schema, table in the log's column names).
    Names are stripped of surrounding spaces; an unknown column close to an absent known name is an
    error (did you mean); `used` names columns the caller reads besides the record's own."""
    schema, raw, _ = _canonical_columns(table, source, used)
    return schema, raw


def _canonical_columns(table: pa.Table, source: str, used=()) -> tuple[str, pa.Table, tuple[str, ...]]:
    schema, mapping, unused = column_mapping(table, source, used)
    table = header_names(table, source)
    n = table.num_rows
    columns = {"row_index": pa.array(np.arange(n, dtype=np.int64))}  # (a range would make pyarrow import pandas)
    for dst, src in mapping.items():
        columns[dst] = table.column(src.strip())
    if "cluster_id" not in columns:  # the log schema's default: every case its own cluster
        columns["cluster_id"] = columns["case_id"]
    for column in LOG_COLUMNS:
        columns.setdefault(column, pa.nulls(n, pa.string()))
    return schema, pa.table({k: columns[k] for k in ("row_index", *LOG_COLUMNS)}), unused


def column_mapping(table: pa.Table, source: str, used=()) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """Detect the schema from the columns of `table` (its rows are not read: an empty table of a
    file's schema will do) and return (schema, {canonical column: input column as the input names
    it, surrounding spaces and all}, unused columns). Every rule about the header is checked here:
    duplicate names, a misspelling, a missing required column, a column of a type the record cannot
    mean."""
    original = table.column_names
    table = header_names(table, source)
    names = set(table.column_names)
    required: tuple[str, ...]
    known: tuple[str, ...]
    if names & {"case_id", "proposed_action", "executed_action"}:
        schema, mapping, required = "log", {c: c for c in LOG_COLUMNS}, LOG_REQUIRED
        if "executed_action" not in names and "utility_executed_local" not in names:
            required = ("case_id", "proposed_action")  # a proposal-only record
        known = LOG_COLUMNS
    elif names & {"image_id", "a_head", "a_exec"}:
        schema, mapping, required = "trace", TRACE_TO_LOG, TRACE_REQUIRED
        known = (*TRACE_TO_LOG, *TRACE_DERIVED)
    else:
        _misspelling(source, table.column_names, (*LOG_COLUMNS, *TRACE_TO_LOG))
        raise RecordError(
            source,
            None,
            "unknown record schema: expected the AuthEval log columns (case_id, proposed_action, "
            "executed_action, utility_executed_local, ...) or the case-trace columns (image_id, "
            f"cluster_id, a_head, a_exec, Uz_head, Uz_exec); found {', '.join(table.column_names)}",
        )
    unused = tuple(c for c in table.column_names if c not in known and c not in used)
    _misspelling(source, unused, [k for k in known if k not in names])
    for column in required:
        if column not in names:
            raise RecordError(source, column, f"required column is missing for the {schema} schema")
    check_column_types(
        table,
        source,
        text=[k for k, v in mapping.items() if v in TEXT_ROLE_COLUMNS],
        numbers=[k for k, v in mapping.items() if v in NUMBER_ROLE_COLUMNS],
    )
    as_given = dict(zip(table.column_names, original))
    return schema, {dst: as_given[src] for src, dst in mapping.items() if src in names}, unused
