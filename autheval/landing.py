"""Landed role-separated logs: the recurring evaluation's input. A log is the AuthEval log schema plus
a `timestamp` (period = its month) or a `batch` column (period = the batch label).

Core functions only (no Dagster): the lake's `landed_records` asset and its sensor call these."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autheval.errors import RecordError
from autheval.records import CSV_SUFFIXES, PARQUET_SUFFIXES, RecordSet, file_sha256, read_table, records_from_table
from warehouse.atomic import atomic_write_text
from warehouse.sql import connect, load_sql

PERIOD_COLUMNS = ("timestamp", "batch")
PROCESSED, REJECTED = "processed", "rejected"


def partition_key(path: Path) -> str:
    """The partition key of a landed file: its name with anything outside [A-Za-z0-9_.-] replaced."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", path.name)


def landed_files(landing: Path) -> list[Path]:
    """Files waiting in the landing folder (CSV or Parquet), in name order."""
    if not landing.is_dir():
        return []
    return sorted(p for p in landing.iterdir() if p.is_file() and p.name.lower().endswith(CSV_SUFFIXES + PARQUET_SUFFIXES))


def locate(landing: Path, key: str) -> Path:
    """The landed file of a partition: still waiting, or already processed (a re-run)."""
    for folder in (landing, landing / PROCESSED):
        for path in landed_files(folder):
            if partition_key(path) == key:
                return path
    raise FileNotFoundError(f"no landed file for partition {key!r} in {landing}")


def read_landed(path: Path) -> tuple[RecordSet, pa.Table]:
    """Validate a landed log; return its records and the canonical table with `period` and
    `landed_file` columns. Raises RecordError (file, column, rule, example) on bad input."""
    raw = read_table(path)
    source = str(path)
    present = [c for c in PERIOD_COLUMNS if c in raw.column_names]
    if not present:
        raise RecordError(source, "timestamp", "a landed log needs a timestamp or a batch column")
    records = records_from_table(raw, source, partition_key(path), file_sha256(path))
    con = connect()
    n = raw.num_rows
    con.register("landed_raw", pa.table({
        "row_index": pa.array(range(n), pa.int64()),
        **{c: raw.column(c) if c in raw.column_names else pa.nulls(n, pa.string()) for c in PERIOD_COLUMNS},
    }))
    periods = con.execute(load_sql("landed_periods")).arrow().read_all()
    bad = pc.and_(pc.is_null(periods.column("period")), pc.is_valid(periods.column("period_source")))
    missing = pc.is_null(periods.column("period_source"))
    for mask, rule in ((bad, "must parse as a date or timestamp"), (missing, "must not be empty")):
        hits = pc.indices_nonzero(mask)
        if len(hits):
            first = hits[0].as_py()
            value = periods.column("period_source")[first].as_py()
            raise RecordError(source, present[0], rule, f"row {first + 1}, value {value!r}; {len(hits)} rows in all")
    period = pc.take(periods.column("period"), records.table.column("row_index"))
    table = records.table.append_column("period", period)
    table = table.append_column("landed_file", pa.array([records.analysis] * table.num_rows, pa.string()))
    return records, table


def set_aside(path: Path, reason: str) -> Path:
    """Move a rejected file to <landing>/rejected/ with a .reason.txt beside it; nothing is lost."""
    target = path.parent / REJECTED / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target.with_name(target.name + ".reason.txt"), reason + "\n")
    shutil.move(str(path), target)
    return target


def mark_processed(path: Path) -> Path:
    if path.parent.name == PROCESSED:
        return path
    target = path.parent / PROCESSED / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), target)
    return target
