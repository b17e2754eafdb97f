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

The pieces live beside this module: the schemas, levels and RecordSet in schema.py, datasets of files in
datasets.py, registration on DuckDB in registration.py, warnings in warnings.py, and reading or hashing a
file whole in autheval/io.py; this module keeps the reading entry points.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow as pa

from autheval.errors import RecordError, first_violation
from autheval.io import CSV_SUFFIXES, GLOB_CHARACTERS, PARQUET_SUFFIXES, _stream_sha256, is_dataset_path
from autheval.records import cluster_stats
from autheval.records.datasets import RecordDataset, _first_line, open_dataset
from autheval.records.registration import canonical_sql
from autheval.records.schema import (
    CANONICAL_COLUMNS,
    FULL,
    LOG_COLUMNS,
    PROPOSAL_ONLY,
    ROLE_SEPARATED,
    TEXT_COLUMNS,
    TRACE_TO_LOG,
    RecordSet,
    _canonical_columns,
)
from autheval.records.warnings import warn
from warehouse.sql import connect, drop_view, fill, load_sql

# Rows whose cluster ids are kept as the sample that cuts a large record's clusters into ranges
# (records/records_check.sql, autheval/records/cluster_stats.py): about this many.
CLUSTER_SAMPLE_ROWS = 1 << 16


def validate(
    con: duckdb.DuckDBPyConnection,
    source: str,
    schema: str,
    locate: Callable[[int], tuple[str, int]] | None = None,
    row_count: int | None = None,
) -> tuple[tuple, list[str]]:
    """(the profile of `raw_records`: records/records_check.sql's counts, for _record_level; a sample of
    its cluster ids, from about CLUSTER_SAMPLE_ROWS of its `row_count` rows), after raising RecordError on
    its first broken rule (one line with an example). One pass tells whether any rule is broken
    (records/records_check.sql); only then does records/records_validate.sql find which and where, the
    reported row is read for its id and value, and a repeated id hash is confirmed on the ids
    themselves. `locate`: for a dataset of several files, row_index -> (the file, the row within it),
    so the line names both."""
    every = max(1, (row_count or 1 << 26) // CLUSTER_SAMPLE_ROWS)  # rows unknown (a CSV): as for 2^26
    checked = con.execute(_filled("records/records_check", sample_every=str(every))).fetchone()
    assert checked is not None  # an aggregate: one row
    broken, *profile, sample = checked
    if not broken:
        return tuple(profile), sample
    for order, column, rule, row_index, n_rows in con.execute(_filled("records/records_validate")).fetchall():
        if order == 2:
            duplicates = con.execute(load_sql("records/records_duplicates")).fetchone()
            assert duplicates is not None  # an aggregate: one row
            n_rows, row_index, case_id = duplicates
            if n_rows == 0:
                continue  # two different ids with one hash
            bad_value = case_id
        else:
            detail = con.execute(
                load_sql("records/records_violation_detail"), {"rule_order": order, "row_index": row_index}
            ).fetchone()
            assert detail is not None  # the reported row is in raw_records
            case_id, bad_value = detail
        if schema == "trace":  # name the column as the file names it
            column = {v: k for k, v in TRACE_TO_LOG.items()}.get(column, column)
        where = source
        if locate is not None:
            where, row_index = locate(row_index)
        raise first_violation(where, (order, column, rule, row_index, case_id, bad_value, n_rows))
    return tuple(profile), sample  # only two different ids with one hash


def _filled(name: str, **fragments: str) -> str:
    """A rule query with the rows' flags (records/records_rule_flags.sql) and `fragments` filled in."""
    return fill(name, fragments={"flags": load_sql("records/records_rule_flags"), **fragments})


def _canonical(raw: pa.Table, typed: pa.Table, analysis: str) -> pa.Table:
    """Text columns from the input (no copy when they are already text) beside the typed columns of
    records/records_normalize.sql (same row order), and the analysis label as a one-value dictionary."""
    n = raw.num_rows
    zeros = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])  # numpy's would import numpy.ma
    label = pa.DictionaryArray.from_arrays(zeros, pa.array([analysis], pa.string()))
    columns = {"analysis": label, "row_index": raw.column("row_index")}
    columns.update({c: _as_text(raw.column(c)) for c in TEXT_COLUMNS})
    columns.update({c: typed.column(c) for c in typed.column_names})
    return pa.table({c: columns[c] for c in CANONICAL_COLUMNS})


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column as text; a text column as it is (a cast would import pyarrow.compute, a slow import)."""
    return column if column.type == pa.string() else column.cast(pa.string())


def records_from_table(
    table: pa.Table, source: str, analysis: str, data_sha256: str, used: tuple[str, ...] = (), con=None
) -> RecordSet:
    """Validate an in-memory record table (log or trace columns) and canonicalise it. `used`: columns
    the caller reads itself (not reported as unused). `con`: a DuckDB connection to reuse for several
    reads (opening one has a fixed cost, paid on every read); a new one by default."""
    schema, raw, unused = _canonical_columns(table, source, tuple(used))
    if table.num_rows == 0:
        raise RecordError(source, None, "file has no records")
    con = con or connect()
    con.register("raw_records", raw)
    profile, sample = validate(con, source, schema, row_count=table.num_rows)
    level, has_local, counts = _record_level(profile)
    canonical = _canonical(raw, con.execute(canonical_sql()).arrow().read_all(), analysis)
    con.unregister("raw_records")
    return with_cluster_stats(
        RecordSet(
            analysis=analysis,
            source=source,
            schema=schema,
            level=level,
            has_local=has_local,
            data_sha256=data_sha256,
            rows=canonical,
            unused_columns=unused,
            **counts,
        ),
        sample,
    )


def _out_of_memory(doing: str, err: duckdb.OutOfMemoryException, source: str) -> OSError:
    """What the machine refuses while reading records, as one line and exit 1 (an OSError naming the
    source and DuckDB's limit): one wording for every step that can run out of memory."""
    return OSError(
        errno.ENOMEM,
        f"out of memory while {doing} (DuckDB's limit is AUTHEVAL_DUCKDB_MEMORY): {_first_line(err)}",
        source,
    )


def with_cluster_stats(records: RecordSet, cluster_sample: Sequence[str]) -> RecordSet:
    """`records` with its per-cluster statistics summed (autheval/records/cluster_stats.py) and its exact
    cluster count (the profile's `n_clusters` is an estimate that sizes the partitions, and
    `cluster_sample`, validate's sample of its cluster ids, cuts them)."""
    try:
        stats = cluster_stats.compute(records, records.n_clusters, cluster_sample)
    except duckdb.OutOfMemoryException as err:
        raise _out_of_memory("summing the records per cluster", err, records.source) from err
    except (duckdb.IOException, cluster_stats.StatsFileError) as err:  # a full or read-only temporary folder
        raise OSError(
            errno.EIO,
            f"cannot write the per-cluster sums to the temporary folder (TMPDIR): {_first_line(err)}",
            records.source,
        ) from err
    return replace(records, n_clusters=stats.n_clusters, cluster_stats=stats)


def _record_level(profile: tuple) -> tuple[str, bool, dict]:
    """(record level, has_local, the RecordSet counts) of a validated record's profile (validate's)."""
    (n_cases, n_clusters, n_changed, n_changed_local, n_local, n_global, n_executed) = profile
    if n_executed == 0:  # no selection: nothing about authority, whatever scores the proposal has
        level, has_local = PROPOSAL_ONLY, False
    elif n_changed > 0 and n_changed_local == n_changed:
        level, has_local = FULL, True
    elif n_changed == 0 and n_local > 0:
        level, has_local = FULL, True
    else:
        level, has_local = ROLE_SEPARATED, False
    counts = {
        "n_cases": n_cases,
        "n_clusters": n_clusters,
        "n_changed": n_changed,
        "n_local": n_local,
        "has_global": n_global > 0,
    }
    return level, has_local, counts


def records_in_place(con, source: str, analysis: str) -> RecordSet:
    """The view `raw_records` on `con` (row_index and the log columns) validated where it lies, as
    records_from_table would validate those rows held (the same rules and messages): its level and
    counts, without rows, data hash or per-cluster sums, for a caller that needs only whether the rows
    form one valid record and what it supports (the monitor's slices: no copy of a slice is held)."""
    profile, _ = validate(con, source, "log")
    level, has_local, counts = _record_level(profile)
    if counts["n_cases"] == 0:
        raise RecordError(source, None, "file has no records")
    return RecordSet(
        analysis=analysis,
        source=source,
        schema="log",
        level=level,
        has_local=has_local,
        data_sha256="",
        rows=None,
        **counts,
    )


def lake_analysis_records(con, files: Sequence[str], analysis: str, source: str) -> RecordSet:
    """One analysis of the lake's `records` table (every analysis in one table, `files` its Parquet
    files, also the view `records` on `con`) validated where it lies, as records_from_table would
    validate its rows held: the same rules and messages, the same data hash (the Arrow IPC bytes of
    records/records_of_analysis.sql's rows, hashed batch by batch as DuckDB streams them), no row held."""
    dataset = RecordDataset(
        source, "lake", "log", tuple(files), (source,), tuple((c, c) for c in LOG_COLUMNS), analysis=analysis
    )
    digest = _stream_sha256(con.execute(load_sql("records/records_of_analysis"), {"analysis": analysis}).arrow())
    try:
        dataset.scan(con, "record_files")
        dataset.raw_records(con, "record_files", analysis).create_view("raw_records")
        profile, sample = validate(con, source, "log", dataset.locate)
        level, has_local, counts = _record_level(profile)
    finally:
        drop_view(con, "raw_records")
        drop_view(con, "record_files")
    if counts["n_cases"] == 0:
        raise RecordError(source, None, "file has no records")
    return with_cluster_stats(
        RecordSet(
            analysis=analysis,
            source=source,
            schema="log",
            level=level,
            has_local=has_local,
            data_sha256=digest,
            rows=None,
            dataset=dataset,
            **counts,
        ),
        sample,
    )


# A record this small is read into memory once (the small-log path: _held_in_memory): its rules, level,
# per-cluster sums and estimators then read the rows held, not the file again (a CSV is parsed on one
# thread, its row numbers being a streaming count, five times per read). Not more: a 1M-row CSV (54 MB)
# read into memory raised the evaluator scheme's peak from 385 to 444 MB in one run (docs/benchmarks.md).
HELD_CSV_BYTES = 32 << 20  # a CSV's bytes on disk (gzip: an eighth of it)
HELD_ROWS = 500_000  # a Parquet dataset's rows
# Rows kept in the RecordSet after the read (its canonical rows): more are read once and summed, then let
# go, so that the estimators do not hold them beside their own memory.
KEPT_ROWS = 250_000


def _refused_by_reader(err: Exception) -> bool:
    """Whether DuckDB's error is its reader refusing the file (not a fault of ours): bad input, a read
    or conversion error, or its plain Error, which a damaged Parquet page raises ("Invalid data")."""
    reader = (duckdb.InvalidInputException, duckdb.IOException, duckdb.ConversionException)
    return isinstance(err, reader) or type(err) is duckdb.Error


def _held_in_memory(dataset: RecordDataset) -> bool:
    """Whether `dataset` is small enough to be read into memory once: local files (an object store is
    scanned where it lies), a CSV of at most HELD_CSV_BYTES, Parquet of at most HELD_ROWS rows."""
    if dataset.protocol is not None:
        return False
    if dataset.kind == "parquet":
        return dataset.n_rows is not None and dataset.n_rows <= HELD_ROWS
    size = 0
    for name in dataset.files:
        try:
            bytes_on_disk = os.stat(name).st_size
        except OSError:
            return False
        size += bytes_on_disk * (8 if name.lower().endswith(".gz") else 1)
    return size <= HELD_CSV_BYTES


def read_dataset(source: str | Path, analysis: str, con=None, used: tuple[str, ...] = ()) -> RecordSet:
    """Validate a record dataset and decide its record level: every rule is SQL over the files (DuckDB
    streams them, within its memory limit) or, for a small record (_held_in_memory), over its rows
    read once into memory; the data hash is computed on a second thread meanwhile. A small record
    holds its canonical rows; a large one holds none: the estimators scan the dataset again."""
    dataset, unused, sha256 = open_dataset(source, used)
    if dataset.n_rows == 0:
        raise RecordError(dataset.source, None, "file has no records")
    held = _held_in_memory(dataset)
    rows = None
    with ThreadPoolExecutor(1, thread_name_prefix="autheval-hash") as pool:
        hashing = pool.submit(sha256)
        con = con or connect()
        unordered = dataset.kind == "parquet" and not held  # row numbers from the files: the order is not needed
        if unordered:
            con.execute(load_sql("records/records_unordered"))
        try:
            dataset.scan(con, "record_files")
            relation = dataset.raw_records(con, "record_files", analysis)
            try:
                raw = relation.arrow().read_all() if held else None
                if raw is None:
                    relation.create_view("raw_records")
                else:  # read once: every rule, the level and the canonical rows from memory
                    con.register("raw_records", raw)
                profile, sample = validate(con, dataset.source, dataset.schema, dataset.locate, dataset.n_rows)
                level, has_local, counts = _record_level(profile)
                if raw is not None:
                    rows = _canonical(raw, con.execute(canonical_sql()).arrow().read_all(), analysis)
            except duckdb.OutOfMemoryException as err:
                raise _out_of_memory("checking the records", err, dataset.source) from err
            except duckdb.Error as err:
                if not _refused_by_reader(err):
                    raise
                # a row the reader refuses: a ragged CSV row, bad quoting or encoding, a damaged Parquet page
                label = "CSV" if dataset.kind == "csv" else "Parquet"
                raise RecordError(dataset.source, None, f"cannot be read as {label}: {_first_line(err)}") from err
        finally:
            drop_view(con, "raw_records")  # the view, or the registered rows
            drop_view(con, "record_files")
            if unordered:
                con.execute(load_sql("records/records_ordered"))
        if counts["n_cases"] == 0:
            raise RecordError(dataset.source, None, "file has no records")
        digest = hashing.result()
    raw = None
    records = with_cluster_stats(
        RecordSet(
            analysis=analysis,
            source=dataset.source,
            schema=dataset.schema,
            level=level,
            has_local=has_local,
            data_sha256=digest,
            rows=rows,
            unused_columns=unused,
            dataset=dataset,
            **counts,
        ),
        sample,
    )
    if rows is not None and records.n_cases > KEPT_ROWS:  # summed; the estimators scan the files again
        records, rows = replace(records, rows=None), None
        pa.default_memory_pool().release_unused()
    return records


def read_records(path: str | Path, analysis: str | None = None, con=None) -> RecordSet:
    """Read, validate and decide the level of one record input where it lies: a CSV file, a Parquet
    file, a folder or glob of Parquet files, or a URI (`con`: a DuckDB connection to reuse)."""
    return warn_unused(read_dataset(path, analysis or default_analysis(path), con=con))


def warn_unused(records: RecordSet, source: str | None = None) -> RecordSet:
    """`records`, after one warning line naming the input (`source`, else the record's) and its columns
    no estimator reads (if any)."""
    if records.unused_columns:
        warn(f"{source or records.source}: columns not used (ignored): {', '.join(records.unused_columns)}")
    return records


def default_analysis(path: str | Path) -> str:
    """An input's analysis name: a file's stem, a folder's name, a glob's or URI's last plain part."""
    if not is_dataset_path(path):
        return Path(path).stem
    text = str(path)
    if "://" in text:  # a URI's path: its query string (`?region=...`) and fragment are not a name
        text = text.split("?", 1)[0].split("#", 1)[0]
    text = text.rstrip("/")
    parts = [p for p in text.replace("://", "/").split("/") if p and not any(c in p for c in GLOB_CHARACTERS)]
    last = parts[-1] if parts else "records"
    for suffix in (*CSV_SUFFIXES, *PARQUET_SUFFIXES):
        if last.lower().endswith(suffix):
            return last[: -len(suffix)]
    return last
