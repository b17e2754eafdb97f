"""Role-separated records: read a log or a case trace, validate it, and decide its record level.

Two input schemas are accepted (CSV or Parquet, detected from the columns):
* the AuthEval log schema: case_id, [cluster_id], proposed_action, executed_action,
  utility_executed_local, [utility_proposed_local], [utility_proposed_global];
* the AuthEval case-trace schema: image_id, cluster_id, a_head, a_exec, Uz_head, Uz_exec, [Ug_head].
Both become one canonical table in the log's column names (see sql/records_normalize.sql).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autheval.errors import RecordError, first_violation
from warehouse.sql import connect, load_sql

LOG_COLUMNS = (
    "case_id",
    "cluster_id",
    "proposed_action",
    "executed_action",
    "utility_executed_local",
    "utility_proposed_local",
    "utility_proposed_global",
)
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
TRACE_DERIVED = ("policy_id", "slate_size", "intervention_type", "intervened", "delta_authority_i",
                 "delta_utility_i")  # fmt: skip
MAX_EDITS = 2  # an unused column this close to a known name is a misspelling, not an extra column
OTHER_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe", ",": "comma"}

# Record levels (what a record can support) and the generic evaluator's mode names.
FULL = "full_counterfactual"
ROLE_SEPARATED = "role_separated"
PROPOSAL_ONLY = "proposal_only"

TEXT_ROLE_COLUMNS = ("case_id", "cluster_id", "proposed_action", "executed_action")  # canonical names
NUMBER_ROLE_COLUMNS = ("utility_executed_local", "utility_proposed_local", "utility_proposed_global")

CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")


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
    table: pa.Table
    unused_columns: tuple[str, ...] = ()  # input columns no estimator reads (listed as a warning)
    n_local: int = 0  # rows with utility_proposed_local: a gap it cannot support says whether it was given at all

    @property
    def mode(self) -> str:
        """The generic evaluator's mode name."""
        if self.level == PROPOSAL_ONLY:
            return "proposal_only"
        if self.has_local:
            return "full"
        return "observable_plus_global" if self.has_global else "observable_only"


class AuthEvalWarning(UserWarning):
    """Something a user should know that does not stop the run (ignored columns, a degenerate
    interval, a comparison without a contrast). The CLI prints each as one line on stderr."""


def warn(message: str) -> None:
    """Issue an AuthEvalWarning (one line)."""
    warnings.warn(message, AuthEvalWarning, stacklevel=3)


def print_warnings_plainly(stream=None) -> None:
    """Print AuthEvalWarnings as `autheval: warning: <message>` lines (on stderr by default), every
    time they are issued; other warnings keep Python's format. For the command line."""
    import sys

    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, AuthEvalWarning):
            print(f"autheval: warning: {message}", file=stream or sys.stderr, flush=True)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("always", AuthEvalWarning)


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


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def table_sha256(table: pa.Table) -> str:
    """SHA-256 of a table's Arrow IPC bytes: the data hash of records that never were one file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def read_table(path: str | Path) -> pa.Table:
    """Read a CSV (every column as text, so bad values can be named) or a Parquet file."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise RecordError(source, None, "file not found")
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        if path.stat().st_size == 0:
            raise RecordError(source, None, "file is empty")
        return _read_csv_text(path)
    if name.endswith(PARQUET_SUFFIXES):
        try:  # ParquetFile, not pq.read_table: the dataset layer it goes through imports pandas (0.5 s)
            with pq.ParquetFile(path) as handle:
                return handle.read()
        except (pa.ArrowInvalid, OSError) as err:
            first = str(err).strip().splitlines()[0]
            raise RecordError(source, None, f"cannot be read as Parquet: {first}") from err
    raise RecordError(source, None, "unknown file type: expected .csv, .csv.gz, .tsv, .parquet or .pq")


def _read_csv_text(path: Path) -> pa.Table:
    """Every column as text (so a bad value can be named, not coerced); empty cells are null."""
    from pyarrow import csv

    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    parse = csv.ParseOptions(delimiter=delimiter)
    try:
        _check_delimiter(path, delimiter)
        with csv.open_csv(path, parse_options=parse) as reader:  # the header gives the column names
            names = reader.schema.names
        convert = csv.ConvertOptions(
            column_types={n: pa.string() for n in names}, strings_can_be_null=True,
            null_values=[""], quoted_strings_can_be_null=True,
        )
        return csv.read_csv(path, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, StopIteration) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no header row"
        raise RecordError(str(path), None, f"cannot be read as CSV: {first}") from err


def _check_delimiter(path: Path, delimiter: str) -> None:
    """A header that is one column which another delimiter would split: say so, instead of a parse
    error or a missing column."""
    import csv
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as handle:
            header = handle.readline().rstrip("\r\n")
    except OSError:
        return  # unreadable: the CSV reader says why
    names = next(csv.reader([header], delimiter=delimiter), [])
    if len(names) != 1:
        return
    for other, label in OTHER_DELIMITERS.items():
        if other != delimiter and len(names[0].split(other)) > 1:
            expected = OTHER_DELIMITERS[delimiter]
            raise RecordError(
                str(path), None, f"the delimiter looks wrong: the header is one column holding {label}s "
                f"({names[0][:60]!r}); expected {expected}-separated columns",
            )


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
    return (pa.types.is_float32(kind) or pa.types.is_float64(kind) or pa.types.is_integer(kind)
            or pa.types.is_decimal(kind) or is_text_type(kind) or pa.types.is_null(kind))


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
    table = header_names(table, source)
    names = set(table.column_names)
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
    check_column_types(table, source, text=[k for k, v in mapping.items() if v in TEXT_ROLE_COLUMNS],
                       numbers=[k for k, v in mapping.items() if v in NUMBER_ROLE_COLUMNS])
    n = table.num_rows
    columns = {"row_index": pa.array(np.arange(n, dtype=np.int64))}  # (a range would make pyarrow import pandas)
    for src, dst in mapping.items():
        if src in names:
            columns[dst] = table.column(src)
    if "cluster_id" not in columns:  # the log schema's default: every case its own cluster
        columns["cluster_id"] = columns["case_id"]
    for column in LOG_COLUMNS:
        columns.setdefault(column, pa.nulls(n, pa.string()))
    return schema, pa.table({k: columns[k] for k in ("row_index", *LOG_COLUMNS)}), unused


def validate(con: duckdb.DuckDBPyConnection, source: str, schema: str) -> None:
    """Raise RecordError on the first broken rule of `raw_records` (one line with an example): one
    cheap pass finds the broken rules (records_validate.sql); only the reported row is then read for
    its id and value, and a repeated id hash is confirmed on the ids themselves."""
    for order, column, rule, row_index, n_rows in con.execute(load_sql("records_validate")).fetchall():
        if order == 2:
            n_rows, row_index, case_id = con.execute(load_sql("records_duplicates")).fetchone()
            if n_rows == 0:
                continue  # two different ids with one hash
            bad_value = case_id
        else:
            case_id, bad_value = con.execute(load_sql("records_violation_detail"),
                                             {"rule_order": order, "row_index": row_index}).fetchone()
        if schema == "trace":  # name the column as the file names it
            column = {v: k for k, v in TRACE_TO_LOG.items()}.get(column, column)
        raise first_violation(source, (order, column, rule, row_index, case_id, bad_value, n_rows))


TEXT_COLUMNS = ("case_id", "cluster_id", "proposed_action", "executed_action")
CANONICAL_COLUMNS = ("analysis", "row_index", *TEXT_COLUMNS, "intervened", "utility_executed_local",
                     "utility_proposed_local", "utility_proposed_global")  # fmt: skip


def _canonical(raw: pa.Table, typed: pa.Table, analysis: str) -> pa.Table:
    """Text columns from the input (no copy when they are already text) beside the typed columns of
    records_normalize.sql (same row order), and the analysis label as a one-value dictionary."""
    n = raw.num_rows
    label = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([analysis]))
    columns = {"analysis": label, "row_index": raw.column("row_index")}
    columns.update({c: _as_text(raw.column(c)) for c in TEXT_COLUMNS})
    columns.update({c: typed.column(c) for c in typed.column_names})
    return pa.table({c: columns[c] for c in CANONICAL_COLUMNS})


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column as text; a text column as it is (a cast would import pyarrow.compute: 0.1-0.2 s)."""
    return column if column.type == pa.string() else column.cast(pa.string())


def records_from_table(
    table: pa.Table, source: str, analysis: str, data_sha256: str, used: tuple[str, ...] = (), con=None
) -> RecordSet:
    """Validate an in-memory record table (log or trace columns) and canonicalise it. `used`: columns
    the caller reads itself (not reported as unused). `con`: a DuckDB connection to reuse for several
    reads (opening one costs 15-20 ms here); a new one by default."""
    schema, raw, unused = _canonical_columns(table, source, tuple(used))
    if table.num_rows == 0:
        raise RecordError(source, None, "file has no records")
    con = con or connect()
    con.register("raw_records", raw)
    validate(con, source, schema)
    (n_cases, n_clusters, n_changed, n_changed_local, n_local, n_global, n_executed) = con.execute(
        load_sql("records_profile")
    ).fetchone()
    if n_executed == 0:  # no selection: nothing about authority, whatever scores the proposal has
        level, has_local = PROPOSAL_ONLY, False
    elif n_changed > 0 and n_changed_local == n_changed:
        level, has_local = FULL, True
    elif n_changed == 0 and n_local > 0:
        level, has_local = FULL, True
    else:
        level, has_local = ROLE_SEPARATED, False
    canonical = _canonical(raw, con.execute(load_sql("records_normalize")).arrow().read_all(), analysis)
    return RecordSet(
        analysis=analysis,
        source=source,
        schema=schema,
        level=level,
        has_local=has_local,
        has_global=n_global > 0,
        n_cases=n_cases,
        n_clusters=n_clusters,
        n_changed=n_changed,
        data_sha256=data_sha256,
        table=canonical,
        unused_columns=unused,
        n_local=n_local,
    )


def read_records(path: str | Path, analysis: str | None = None, con=None) -> RecordSet:
    """Read, validate and canonicalise one record file (`con`: see records_from_table)."""
    path = Path(path)
    table = read_table(path)
    records = records_from_table(table, str(path), analysis or path.stem, file_sha256(path), con=con)
    if records.unused_columns:
        warn(f"{path}: columns not used (ignored): {', '.join(records.unused_columns)}")
    return records
