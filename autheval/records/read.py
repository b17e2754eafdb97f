"""Role-separated records: read a log or a case trace, validate it, and decide its record level.

Two input schemas are accepted (CSV or Parquet, detected from the columns):
* the AuthEval log schema: case_id, [cluster_id], proposed_action, executed_action,
  utility_executed_local, [utility_proposed_local], [utility_proposed_global];
* the AuthEval case-trace schema: image_id, cluster_id, a_head, a_exec, Uz_head, Uz_exec, [Ug_head].
Both become one canonical table in the log's column names (see sql/records/records_normalize.sql).

A record given by path (`read_records`) is read where it lies, never as a whole table in this
process: a CSV file, a Parquet file, a folder or glob of Parquet files, or a URI (`file://`, or an
object store through the lake's filesystem seam, warehouse/filesystem.py) is a `RecordDataset`,
which DuckDB scans (read_csv / read_parquet over the file list) for every rule of validation, the
record level and, later, the estimators' per-cluster sums (`register_records`). The data hash of a
dataset of one file is that file's SHA-256; of several, the SHA-256 of their SHA-256s in name order
(`dataset_sha256`), hashed streaming. Records already in memory (a lake table's rows, a landed log)
keep the table path (`records_from_table`).
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import posixpath
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autheval.records import cluster_stats
from autheval.records.cluster_stats import ClusterStatsFile
from autheval.errors import RecordError, first_violation
from warehouse.sql import connect, load_sql, quote_identifier, quote_literal

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
    rows: pa.Table | None  # the canonical rows when they are held here (records_from_table), else None
    unused_columns: tuple[str, ...] = ()  # input columns no estimator reads (listed as a warning)
    n_local: int = 0  # rows with utility_proposed_local: a gap it cannot support says whether it was given at all
    dataset: "RecordDataset | None" = None  # the files the rows are read from, where they lie
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
    """A file's SHA-256; for a record dataset (a folder, a glob, a URI) its data hash (data_sha256),
    so a receipt names and verify re-hashes a dataset input as it does a file."""
    if is_dataset_path(path):
        return data_sha256(path)
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
    as_given = dict(zip(table.column_names, original))
    return schema, {dst: as_given[src] for src, dst in mapping.items() if src in names}, unused


def validate(con: duckdb.DuckDBPyConnection, source: str, schema: str,
             locate: Callable[[int], tuple[str, int]] | None = None) -> None:
    """Raise RecordError on the first broken rule of `raw_records` (one line with an example): one
    cheap pass finds the broken rules (records/records_validate.sql); only the reported row is then read for
    its id and value, and a repeated id hash is confirmed on the ids themselves. `locate`: for a
    dataset of several files, row_index -> (the file, the row within it), so the line names both."""
    for order, column, rule, row_index, n_rows in con.execute(load_sql("records/records_validate")).fetchall():
        if order == 2:
            n_rows, row_index, case_id = con.execute(load_sql("records/records_duplicates")).fetchone()
            if n_rows == 0:
                continue  # two different ids with one hash
            bad_value = case_id
        else:
            case_id, bad_value = con.execute(load_sql("records/records_violation_detail"),
                                             {"rule_order": order, "row_index": row_index}).fetchone()
        if schema == "trace":  # name the column as the file names it
            column = {v: k for k, v in TRACE_TO_LOG.items()}.get(column, column)
        where = source
        if locate is not None:
            where, row_index = locate(row_index)
        raise first_violation(where, (order, column, rule, row_index, case_id, bad_value, n_rows))


TEXT_COLUMNS = ("case_id", "cluster_id", "proposed_action", "executed_action")
CANONICAL_COLUMNS = ("analysis", "row_index", *TEXT_COLUMNS, "intervened", "utility_executed_local",
                     "utility_proposed_local", "utility_proposed_global")  # fmt: skip


def _canonical(raw: pa.Table, typed: pa.Table, analysis: str) -> pa.Table:
    """Text columns from the input (no copy when they are already text) beside the typed columns of
    records/records_normalize.sql (same row order), and the analysis label as a one-value dictionary."""
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
    level, has_local, counts = _record_level(con)
    canonical = _canonical(raw, con.execute(load_sql("records/records_normalize")).arrow().read_all(), analysis)
    con.unregister("raw_records")
    return with_cluster_stats(RecordSet(analysis=analysis, source=source, schema=schema, level=level,
                                        has_local=has_local, data_sha256=data_sha256, rows=canonical,
                                        unused_columns=unused, **counts))


def with_cluster_stats(records: RecordSet) -> RecordSet:
    """`records` with its per-cluster statistics summed (autheval/records/cluster_stats.py) and its exact
    cluster count (the profile's `n_clusters` is an estimate that sizes the partitions)."""
    try:
        stats = cluster_stats.compute(records, records.n_clusters)
    except duckdb.OutOfMemoryException as err:  # what the machine refuses: one line, exit 1
        raise OSError(errno.ENOMEM, f"out of memory while summing the records per cluster (DuckDB's limit is "
                      f"AUTHEVAL_DUCKDB_MEMORY): {_first_line(err)}", records.source) from err
    except duckdb.IOException as err:  # a full or read-only temporary folder
        raise OSError(errno.EIO, f"cannot write the per-cluster sums to the temporary folder (TMPDIR): "
                      f"{_first_line(err)}", records.source) from err
    return replace(records, n_clusters=stats.n_clusters, cluster_stats=stats)


def _record_level(con) -> tuple[str, bool, dict]:
    """(record level, has_local, the RecordSet counts) of the validated `raw_records` on `con`."""
    (n_cases, n_clusters, n_changed, n_changed_local, n_local, n_global, n_executed) = con.execute(
        load_sql("records/records_profile")
    ).fetchone()
    if n_executed == 0:  # no selection: nothing about authority, whatever scores the proposal has
        level, has_local = PROPOSAL_ONLY, False
    elif n_changed > 0 and n_changed_local == n_changed:
        level, has_local = FULL, True
    elif n_changed == 0 and n_local > 0:
        level, has_local = FULL, True
    else:
        level, has_local = ROLE_SEPARATED, False
    counts = {"n_cases": n_cases, "n_clusters": n_clusters, "n_changed": n_changed, "n_local": n_local,
              "has_global": n_global > 0}
    return level, has_local, counts


# --- records as a dataset: read where they lie -------------------------------------------------------

ROW_BITS = 40  # a dataset row's row_index: (file number << ROW_BITS) + its row within the file
GLOB_CHARACTERS = "*?["
FSSPEC_PREFIX = "autheval"  # DuckDB reads an object store through the seam as autheval<scheme>://


@dataclass(frozen=True)
class RecordDataset:
    """Record files read where they lie, in name order: one CSV file, or Parquet files (one, a
    folder's, a glob's, a URI's). `files`: what DuckDB reads (local paths, or an object store's paths
    through the filesystem seam); `names`: each file as messages name it (and Spark reads it);
    `columns`: canonical column -> the input's column (`c<i>` for a CSV's i-th column)."""

    source: str  # as the user named it
    kind: str  # 'parquet' or 'csv'
    schema: str  # 'log' or 'trace'
    files: tuple[str, ...]
    names: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    n_rows: int | None = None  # from the Parquet footers (a CSV's is known once it is scanned)
    width: int = 0  # a CSV's columns
    delimiter: str = ","
    filesystem: object = field(default=None, compare=False)  # an object store's pyarrow filesystem
    protocol: str | None = None  # the fsspec protocol DuckDB reads `files` through (object stores)
    analysis: str | None = None  # kind 'lake': the one analysis of a lake table that these records are

    def locate(self, row_index: int) -> tuple[str, int]:
        """(the file, the row within it) of a row_index; the dataset's own name for one file."""
        if len(self.files) == 1 or self.kind == "lake":  # a lake analysis' rows are numbered in case_id order
            return self.source, row_index
        return self.names[row_index >> ROW_BITS], row_index & ((1 << ROW_BITS) - 1)

    def scan(self, con, view: str) -> None:
        """Create the temporary view `view` on `con`: every input column as the files give it, beside
        `_autheval_row` (the row_index), read streaming (sql/records_dataset_<kind>.sql)."""
        if self.protocol is not None:
            _register_filesystem(con, self.protocol, self.filesystem)
        text = load_sql(f"records/records_dataset_{self.kind}").replace("{view}", quote_identifier(view))
        if self.kind == "lake":
            text = text.replace("{analysis}", quote_literal(self.analysis))
        if self.kind == "csv":
            names = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(self.width)) + "}"
            text = text.replace("{columns}", names).replace("{delimiter}", quote_literal(self.delimiter))
        con.execute(text.replace("{files}", _path_list(self.files)))

    def raw_records(self, con, view: str, analysis: str):
        """A lazy relation over the scan `view`: the analysis label, row_index and the record's
        columns in the log's names (absent ones NULL, cluster_id = case_id where a log has none): the
        layout of records/records_validate.sql's raw_records, plus `analysis`."""
        from duckdb import ColumnExpression, ConstantExpression

        given = dict(self.columns)
        given.setdefault("cluster_id", given["case_id"])  # the log schema's default: every case its own cluster
        exprs = [ConstantExpression(analysis).cast("VARCHAR").alias("analysis"),
                 ColumnExpression("_autheval_row").alias("row_index")]
        for column in LOG_COLUMNS:
            if column in given:
                exprs.append(ColumnExpression('"' + given[column].replace('"', '""') + '"').alias(column))
            else:
                exprs.append(ConstantExpression(None).cast("VARCHAR").alias(column))
        return con.table(view).select(*exprs)


def scan_parquet_files(con, view: str, files: Sequence[str]) -> None:
    """Create the temporary view `view` on `con` over Parquet `files` (paths or URIs DuckDB reads,
    such as a lake table's), every column beside `_autheval_row`, read where they lie, streaming
    (sql/records/records_dataset_parquet.sql): the rows are never held in this process."""
    text = load_sql("records/records_dataset_parquet").replace("{view}", quote_identifier(view))
    con.execute(text.replace("{files}", _path_list(files)))


def lake_analysis_records(con, files: Sequence[str], analysis: str, source: str) -> RecordSet:
    """One analysis of the lake's `records` table (every analysis in one table, `files` its Parquet
    files, also the view `records` on `con`) validated where it lies, as records_from_table would
    validate its rows held: the same rules and messages, the same data hash (the Arrow IPC bytes of
    records/records_of_analysis.sql's rows, hashed batch by batch as DuckDB streams them), no row held."""
    dataset = RecordDataset(source, "lake", "log", tuple(files), (source,), tuple((c, c) for c in LOG_COLUMNS),
                            analysis=analysis)
    digest = _stream_sha256(con.execute(load_sql("records/records_of_analysis"), {"analysis": analysis}).arrow())
    try:
        dataset.scan(con, "record_files")
        dataset.raw_records(con, "record_files", analysis).create_view("raw_records")
        validate(con, source, "log", dataset.locate)
        level, has_local, counts = _record_level(con)
    finally:
        con.execute(load_sql("warehouse/drop_view").replace("{view}", quote_identifier("raw_records")))
        con.execute(load_sql("warehouse/drop_view").replace("{view}", quote_identifier("record_files")))
    if counts["n_cases"] == 0:
        raise RecordError(source, None, "file has no records")
    return with_cluster_stats(RecordSet(analysis=analysis, source=source, schema="log", level=level,
                                        has_local=has_local, data_sha256=digest, rows=None, dataset=dataset,
                                        **counts))


class _HashSink:
    """A write-only file that hashes what is written to it."""

    closed = False

    def __init__(self):
        self.digest = hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _stream_sha256(reader: pa.RecordBatchReader) -> str:
    """table_sha256 of the table `reader` would read, one batch at a time (the same IPC bytes)."""
    sink = _HashSink()
    with pa.PythonFile(sink, mode="w") as handle, pa.ipc.new_stream(handle, reader.schema.remove_metadata()) as writer:
        for batch in reader:
            writer.write_batch(batch)
    return sink.digest.hexdigest()


def _path_list(files: Sequence[str]) -> str:
    return "[" + ", ".join(quote_literal(f) for f in files) + "]"


def _register_filesystem(con, protocol: str, filesystem) -> None:
    """Let DuckDB read `protocol://` paths through a pyarrow filesystem (the lake's seam), by fsspec."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    if protocol in con.list_filesystems():
        return
    seam = type("SeamFileSystem", (ArrowFSWrapper,), {"protocol": (protocol,)})
    con.register_filesystem(seam(filesystem))


def is_dataset_path(path: str | Path) -> bool:
    """A folder, a glob or a URI: records that `read_records` reads as a dataset of files."""
    text = str(path)
    if "://" in text:
        return True
    return Path(text).is_dir() or (any(c in text for c in GLOB_CHARACTERS) and not Path(text).is_file())


def _is_parquet(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES)


def _hidden(relative: str) -> bool:
    """A path part that Spark and Hive skip too: `.name` (temporary files) or `_name` (markers)."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def dataset_files(source: str | Path):
    """(location, [paths in name order], [display names]) of the Parquet files `source` names: one
    file, every Parquet file under a folder (hidden ones skipped), those a glob matches (`*` spans
    folders), or the same through a URI (file://, an object store: warehouse.filesystem's seam)."""
    import pyarrow.fs as pafs

    from warehouse.filesystem import lake_location

    text, pattern = str(source), None
    if any(c in text for c in GLOB_CHARACTERS):
        head = text[: min(text.index(c) for c in GLOB_CHARACTERS if c in text)]
        base = head.rstrip("/") if head.endswith("/") else posixpath.dirname(head)
        pattern = text[len(base):].lstrip("/")
        text = base or "."
    location = lake_location(text)
    fs = location.filesystem
    kind = fs.get_file_info(location.root).type
    if kind == pafs.FileType.NotFound:
        raise RecordError(str(source), None, "file not found" if pattern is None else "no such folder")
    if kind == pafs.FileType.File and pattern is None:
        paths = [location.root]
    else:
        paths = []
        for entry in fs.get_file_info(pafs.FileSelector(location.root, recursive=True)):
            relative = entry.path[len(location.root):].lstrip("/")
            if entry.type != pafs.FileType.File or _hidden(relative):
                continue
            if (fnmatch.fnmatchcase(relative, pattern) if pattern is not None else _is_parquet(entry.base_name)):
                paths.append(entry.path)
        paths.sort()
        if not paths:
            what = f"no file matches {pattern!r}" if pattern else "the folder holds no Parquet file (.parquet, .pq)"
            raise RecordError(str(source), None, what)
    names = [path if location.is_local else f"{location.scheme}://{path.lstrip('/')}" for path in paths]
    for path, name in zip(paths, names):
        if not _is_parquet(path):
            raise RecordError(name, None, "unknown file type: a dataset of files is Parquet (.parquet or .pq)")
    return location, paths, names


def dataset_sha256(location, paths: Sequence[str]) -> str:
    """The data hash of a dataset: for one file, that file's SHA-256 (so a file hashes the same
    however it is named: a path, a folder holding it, a URI); for several, the SHA-256 of the ASCII
    text made of each file's SHA-256 in hex followed by a newline, the files in name order. Every file
    is hashed streaming (1 MiB blocks), so no rows are held."""
    digests = []
    for path in paths:
        digest = hashlib.sha256()
        with location.filesystem.open_input_stream(path) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests.append(digest.hexdigest())
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(d + "\n" for d in digests).encode("ascii")).hexdigest()


def data_sha256(source: str | Path) -> str:
    """The data hash of a record input: a file's SHA-256, or a dataset's (`dataset_sha256`)."""
    if not is_dataset_path(source):
        return file_sha256(source)
    location, paths, _ = dataset_files(source)
    return dataset_sha256(location, paths)


def open_dataset(source: str | Path, used: tuple[str, ...] = ()) -> tuple[RecordDataset, tuple[str, ...],
                                                                   Callable[[], str]]:
    """(the RecordDataset of a record path or URI, its unused columns, a function giving its data
    hash). Its header is checked (column_mapping) on the file schemas alone: every Parquet file's
    footer must give the first file's columns and types; no row is read."""
    text = str(source)
    if not is_dataset_path(text):
        path = Path(text)
        if not path.is_file():
            raise RecordError(text, None, "file not found")
        if path.name.lower().endswith(CSV_SUFFIXES):
            return _csv_dataset(path, used)
        if not _is_parquet(path.name):
            raise RecordError(text, None, "unknown file type: expected .csv, .csv.gz, .tsv, .parquet or .pq")
    location, paths, names = dataset_files(text)
    first, first_name, n_rows = None, None, 0
    for path, name in zip(paths, names):
        try:
            with location.filesystem.open_input_file(path) as handle, pq.ParquetFile(handle) as parquet:
                schema, rows = parquet.schema_arrow.remove_metadata(), parquet.metadata.num_rows
        except (pa.ArrowInvalid, OSError) as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RecordError(text if len(paths) == 1 else name, None, f"cannot be read as Parquet: {message}") from err
        if first is None:
            first, first_name = schema, name
            kind, mapping, unused = column_mapping(schema.empty_table(), text if len(paths) == 1 else name, used)
        elif schema != first:
            raise RecordError(name, _schema_difference(first, schema), f"has other columns or types than "
                              f"{first_name} (every file of a dataset has the same columns, of the same types)")
        n_rows += rows
    protocol = None if location.is_local else f"{FSSPEC_PREFIX}{location.scheme}"
    files = tuple(paths) if location.is_local else tuple(f"{protocol}://{p}" for p in paths)
    dataset = RecordDataset(text, "parquet", kind, files, tuple(names), tuple(mapping.items()), n_rows,
                            filesystem=None if location.is_local else location.filesystem, protocol=protocol)
    return dataset, unused, lambda: dataset_sha256(location, paths)


def _csv_dataset(path: Path, used=()) -> tuple[RecordDataset, tuple[str, ...], Callable[[], str]]:
    """A CSV file as a dataset of one file: its header read here (names stripped, checked), its rows
    scanned by DuckDB, every cell as text (so a bad value can be named, not coerced)."""
    import csv
    import gzip

    source = str(path)
    if path.stat().st_size == 0:
        raise RecordError(source, None, "file is empty")
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    _check_delimiter(path, delimiter)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as handle:
            header = next(csv.reader(handle, delimiter=delimiter), None)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise RecordError(source, None, f"cannot be read as CSV: {_first_line(err)}") from err
    if not header:
        raise RecordError(source, None, "cannot be read as CSV: no header row")
    kind, mapping, unused = column_mapping(_header_table(header), source, used)
    position = {name: i for i, name in enumerate(header)}
    columns = tuple((dst, f"c{position[src]}") for dst, src in mapping.items())
    dataset = RecordDataset(source, "csv", kind, (str(path),), (source,), columns, width=len(header),
                            delimiter=delimiter)
    return dataset, unused, lambda: file_sha256(path)


def _header_table(header: list[str]) -> pa.Table:
    """An empty table with the header's names (duplicates kept, so header_names can name them)."""
    return pa.Table.from_arrays([pa.array([], pa.string()) for _ in header], names=list(header))


def _schema_difference(first: pa.Schema, other: pa.Schema) -> str | None:
    """The first column where two files' schemas differ (None when only the order differs)."""
    for name in [*first.names, *other.names]:
        a = first.field(name).type if name in first.names else None
        b = other.field(name).type if name in other.names else None
        if a != b:
            return name
    return None


def read_dataset(source: str | Path, analysis: str, con=None, used: tuple[str, ...] = ()) -> RecordSet:
    """Validate a record dataset where it lies and decide its record level: every rule is SQL over
    the files (DuckDB streams them, within its memory limit); the data hash is computed on a second
    thread meanwhile. The RecordSet holds no rows: the estimators scan the dataset again."""
    dataset, unused, sha256 = open_dataset(source, used)
    if dataset.n_rows == 0:
        raise RecordError(dataset.source, None, "file has no records")
    with ThreadPoolExecutor(1, thread_name_prefix="autheval-hash") as pool:
        hashing = pool.submit(sha256)
        con = con or connect()
        unordered = dataset.kind == "parquet"  # row numbers from the files: the order is not needed
        if unordered:
            con.execute(load_sql("records/records_unordered"))
        try:
            dataset.scan(con, "record_files")
            dataset.raw_records(con, "record_files", analysis).create_view("raw_records")
            try:
                validate(con, dataset.source, dataset.schema, dataset.locate)
                level, has_local, counts = _record_level(con)
            except (duckdb.InvalidInputException, duckdb.IOException, duckdb.ConversionException) as err:
                # a row the reader refuses: a ragged CSV row, bad quoting or encoding, a damaged Parquet page
                label = "CSV" if dataset.kind == "csv" else "Parquet"
                raise RecordError(dataset.source, None, f"cannot be read as {label}: {_first_line(err)}") from err
            except duckdb.OutOfMemoryException as err:  # what the machine refuses: one line, exit 1
                raise OSError(errno.ENOMEM, f"out of memory while checking the records (DuckDB's limit is "
                              f"AUTHEVAL_DUCKDB_MEMORY): {_first_line(err)}", dataset.source) from err
        finally:
            con.execute(load_sql("warehouse/drop_view").replace("{view}", quote_identifier("raw_records")))
            con.execute(load_sql("warehouse/drop_view").replace("{view}", quote_identifier("record_files")))
            if unordered:
                con.execute(load_sql("records/records_ordered"))
        if counts["n_cases"] == 0:
            raise RecordError(dataset.source, None, "file has no records")
        digest = hashing.result()
    return with_cluster_stats(RecordSet(analysis=analysis, source=dataset.source, schema=dataset.schema,
                                        level=level, has_local=has_local, data_sha256=digest, rows=None,
                                        unused_columns=unused, dataset=dataset, **counts))


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def register_records(con, recordsets: Sequence[RecordSet], name: str = "records") -> None:
    """Make the canonical rows of `recordsets` readable as `name` on `con`: held rows registered as
    they are; a dataset's as a view that scans its files (sql/records/records_dataset_canonical.sql over
    the dataset's columns), so no row is held in this process."""
    if all(r.rows is not None for r in recordsets):
        con.register(name, pa.concat_tables([r.rows for r in recordsets]))
        return
    relations = []
    for i, records in enumerate(recordsets):
        if records.rows is not None:
            held = f"record_rows_{i}"
            con.register(held, records.rows)
            relations.append(con.sql(load_sql("records/records_held_canonical").replace("{rows}", quote_identifier(held))))
            continue
        files, raw = f"record_files_{i}", f"record_raw_{i}"
        records.dataset.scan(con, files)
        records.dataset.raw_records(con, files, records.analysis).create_view(raw)
        relations.append(con.sql(load_sql("records/records_dataset_canonical").replace("{raw}", quote_identifier(raw))))
    union = relations[0]
    for other in relations[1:]:
        union = union.union(other)
    union.create_view(name)


def read_records(path: str | Path, analysis: str | None = None, con=None) -> RecordSet:
    """Read, validate and decide the level of one record input where it lies: a CSV file, a Parquet
    file, a folder or glob of Parquet files, or a URI (`con`: a DuckDB connection to reuse)."""
    records = read_dataset(path, analysis or default_analysis(path), con=con)
    if records.unused_columns:
        warn(f"{records.source}: columns not used (ignored): {', '.join(records.unused_columns)}")
    return records


def default_analysis(path: str | Path) -> str:
    """An input's analysis name: a file's stem, a folder's name, a glob's or URI's last plain part."""
    if not is_dataset_path(path):
        return Path(path).stem
    text = str(path).rstrip("/")
    parts = [p for p in text.replace("://", "/").split("/") if p and not any(c in p for c in GLOB_CHARACTERS)]
    last = parts[-1] if parts else "records"
    for suffix in (*CSV_SUFFIXES, *PARQUET_SUFFIXES):
        if last.lower().endswith(suffix):
            return last[: -len(suffix)]
    return last
