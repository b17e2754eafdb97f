"""Landed role-separated logs: the recurring evaluation's input. A log is the AuthEval log schema plus
a `timestamp` (period = its month) or a `batch` column (period = the batch label).

Landing is keyed by content: a file's partition key is the start of the SHA-256 of its bytes, so each
distinct file lands exactly once, whatever its name and whatever Dagster instance watches the folder.
Nothing landed is ever overwritten: processed and rejected copies are stored as `<key>__<name>`, and a
file identical to one already landed or rejected is moved to `duplicates/` with a reason beside it.

Only complete files land. Writers should write to a temporary name the watcher ignores (a name starting
with `.`, or ending in `.tmp`, `.part` or `.partial`) and rename it in when done; and the watcher lands
a file only once it has seen the same size and modification time on two consecutive looks.

Core functions only (no Dagster): the lake's `landed_records` and `trend` assets and the landing sensor
call these."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autheval.errors import RecordError
from autheval.estimators import DEFAULT_REPS, DEFAULT_SEEDS, METRICS, UNITS, EstimationResult, estimate
from autheval.records import (
    CSV_SUFFIXES,
    PARQUET_SUFFIXES,
    RecordSet,
    file_sha256,
    header_names,
    read_table,
    records_from_table,
)
from autheval.recordsets import recordsets_by
from autheval.study import estimates_table
from warehouse.atomic import atomic_write_text
from warehouse.lake import Lake
from warehouse.sql import connect, load_sql, materialize

PERIOD_COLUMNS = ("timestamp", "batch")
PROCESSED, REJECTED, DUPLICATES = "processed", "rejected", "duplicates"
LANDED_TABLE = "landed_records"
KEY_LENGTH = 20  # hex digits of the SHA-256 (80 bits) that name a landed file's partition
SEPARATOR = "__"  # processed/<key>__<original name>
TEMPORARY_SUFFIXES = (".tmp", ".part", ".partial")
ALL_PERIODS = "all"
TREND_SCHEME = "evaluator"


class LandingChanged(RuntimeError):
    """A landed file changed between the look that keyed it and the read: not bad input, try later."""


def content_key(sha256: str) -> str:
    """The partition key of a landed file: the first KEY_LENGTH hex digits of its SHA-256."""
    return sha256[:KEY_LENGTH]


def is_candidate(path: Path) -> bool:
    """A file the watcher considers: a CSV or Parquet log, not hidden and not a temporary name."""
    name = path.name
    lower = name.lower()
    if name.startswith(".") or lower.endswith(TEMPORARY_SUFFIXES):
        return False
    return path.is_file() and lower.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES)


def landed_files(landing: Path) -> list[Path]:
    """Files waiting in the landing folder (CSV or Parquet, no temporary names), in name order."""
    if not landing.is_dir():
        return []
    return sorted(p for p in landing.iterdir() if is_candidate(p))


def stored_name(key: str, name: str) -> str:
    return f"{key}{SEPARATOR}{name}"


def original_name(path: Path) -> str:
    """The name a file was dropped under (a stored copy is `<key>__<name>`)."""
    head, sep, tail = path.name.partition(SEPARATOR)
    return tail if sep and len(head) == KEY_LENGTH and path.parent.name in (PROCESSED, REJECTED) else path.name


def _stored_copies(landing: Path, folder: str, key: str) -> list[Path]:
    where = landing / folder
    if not where.is_dir():
        return []
    return sorted(p for p in where.glob(stored_name(key, "*")) if not p.name.endswith(".reason.txt"))


@dataclass(frozen=True)
class Landed:
    """A file found for a partition key: where it is, the name it was dropped under, its SHA-256."""

    path: Path
    name: str
    sha256: str

    @property
    def key(self) -> str:
        return content_key(self.sha256)


def locate(landing: Path, key: str, hint: str | None = None) -> Landed:
    """The file of partition `key`: its processed copy (a re-run) or the waiting file whose content has
    this key (the file named `hint` is hashed first). The content is checked, never assumed."""
    candidates = _stored_copies(landing, PROCESSED, key)
    waiting = landed_files(landing)
    if hint:
        waiting.sort(key=lambda p: p.name != hint)
    for path in [*candidates, *waiting]:
        sha = file_sha256(path)
        if content_key(sha) == key:
            return Landed(path, original_name(path), sha)
    raise FileNotFoundError(
        f"no landed file with content key {key!r} in {landing} or its {PROCESSED}/ folder "
        "(was it changed or removed after the sensor saw it?)"
    )


def already_handled(landing: Path, lake: Lake, key: str) -> str | None:
    """Why content `key` must not land again (landed, processed or rejected before), or None."""
    if lake.partition_path(LANDED_TABLE, key).exists():
        return f"identical content already landed as partition {key} of {LANDED_TABLE}"
    for folder in (PROCESSED, REJECTED):
        copies = _stored_copies(landing, folder, key)
        if copies:
            return f"identical content already {folder}: {folder}/{copies[0].name}"
    return None


def read_landed(path: Path, key: str | None = None, name: str | None = None,
                sha256: str | None = None) -> tuple[RecordSet, pa.Table]:
    """Validate a landed log; return its records and the canonical table with `period`,
    `landed_file` (the name it was dropped under), `landed_key` (its content key) and `record_level`
    columns. Raises RecordError (file, column, rule, example) on bad input, LandingChanged when the
    bytes read are not the bytes `sha256` names."""
    sha256 = sha256 or file_sha256(path)
    key = key or content_key(sha256)
    name = name or original_name(path)
    raw = header_names(read_table(path), str(path))  # ' timestamp' is the period column too
    if file_sha256(path) != sha256:
        raise LandingChanged(f"{path}: the file changed while it was being read; it will be looked at again")
    source = str(path)
    present = [c for c in PERIOD_COLUMNS if c in raw.column_names]
    if not present:
        raise RecordError(source, "timestamp", "a landed log needs a timestamp or a batch column")
    records = records_from_table(raw, source, key, sha256, used=PERIOD_COLUMNS)
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
    rows = records.table.num_rows
    table = records.table.append_column("period", period)
    for column, value in (("landed_file", name), ("landed_key", key), ("record_level", records.level)):
        table = table.append_column(column, pa.array([value] * rows, pa.string()))
    return records, table


def _move_no_clobber(path: Path, target: Path) -> Path:
    """Move `path` to `target`, or to `target` with a counter when that name is taken: never overwrite."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        candidate = target if n == 1 else target.with_name(f"{n}{SEPARATOR}{target.name}")
        try:
            os.link(path, candidate)  # fails if the name exists: no window for a silent overwrite
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links
            if candidate.exists():
                continue
            os.replace(path, candidate)
            return candidate
        os.unlink(path)
        return candidate
    raise FileExistsError(f"no free name for {target}")


def set_aside(found: Landed | Path, reason: str, folder: str = REJECTED) -> Path:
    """Move a rejected (or duplicate) file to <landing>/<folder>/<key>__<name> with a .reason.txt
    beside it; nothing is lost and nothing is overwritten."""
    if isinstance(found, Path):
        found = Landed(found, found.name, file_sha256(found))
    landing = found.path.parent.parent if found.path.parent.name == PROCESSED else found.path.parent
    target = _move_no_clobber(found.path, landing / folder / stored_name(found.key, found.name))
    atomic_write_text(target.with_name(target.name + ".reason.txt"), reason + "\n")
    return target


def mark_processed(found: Landed) -> Path:
    """Move a landed file to <landing>/processed/<key>__<name> (a processed copy stays where it is)."""
    if found.path.parent.name == PROCESSED:
        return found.path
    return _move_no_clobber(found.path, found.path.parent / PROCESSED / stored_name(found.key, found.name))


# --- the watcher: which waiting files are complete, new, or duplicates -------------------------------


@dataclass
class Tick:
    """What one look at the landing folder found: (key, name, run key) of each file to land (the run
    key names the content and the file's (size, mtime), so a later drop of content that never landed
    gets a run again), files still changing, duplicates moved aside, and the cursor for the next look."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    duplicates: list[Path] = field(default_factory=list)
    cursor: str = "{}"


def _signature(path: Path) -> list[int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def watch(landing: Path, lake: Lake, cursor: str | None) -> Tick:
    """One look at the landing folder. A file is complete when its (size, mtime) equal those of the
    previous look (the cursor); only then is it hashed and keyed. A complete file whose content was
    landed, processed or rejected before is moved to duplicates/ with a reason (side effect); any other
    complete file is returned to be landed (one request per distinct content)."""
    previous = json.loads(cursor).get("files", {}) if cursor else {}
    seen: dict[str, dict] = {}
    tick = Tick()
    requested: set[str] = set()
    for path in landed_files(landing):
        signature = _signature(path)
        if signature is None:
            continue
        before = previous.get(path.name)
        if not before or before["signature"] != signature:
            seen[path.name] = {"signature": signature, "sha256": None}
            tick.waiting.append(path.name)
            continue
        sha = before.get("sha256") or file_sha256(path)
        if _signature(path) != signature:  # changed while hashed: look again next time
            seen[path.name] = {"signature": _signature(path), "sha256": None}
            tick.waiting.append(path.name)
            continue
        seen[path.name] = {"signature": signature, "sha256": sha}
        key = content_key(sha)
        found = Landed(path, path.name, sha)
        reason = already_handled(landing, lake, key)
        if reason:
            tick.duplicates.append(set_aside(found, f"{path.name}: not landed again; {reason}", DUPLICATES))
            seen.pop(path.name)
        elif key not in requested:  # a second identical waiting file is a duplicate once the first lands
            requested.add(key)
            tick.requests.append((key, path.name, f"{key}-{signature[0]}-{signature[1]}"))
    tick.cursor = json.dumps({"files": seen}, sort_keys=True)
    return tick


# --- the trend: every landed log to date and per period, pooled by what the records support ----------


def _trend_schema(reps: int) -> pa.Schema:
    empty = estimates_table(EstimationResult(TREND_SCHEME, reps, DEFAULT_SEEDS[TREND_SCHEME], (0.025, 0.975), {}))
    fields = [f for f in empty.schema if f.name != "analysis"]
    return pa.schema([pa.field("period", pa.string()), pa.field("pool", pa.string()), *fields])


def empty_trend(reps: int = DEFAULT_REPS) -> pa.Table:
    """The trend table before anything has landed: no rows, the right columns."""
    return _trend_schema(reps).empty_table()


def _pool_rows(con, pool: str, periods: list[str], reps: int) -> tuple[list[dict], str | None]:
    """Estimate one pool (all its periods to date, then each period). A pooling that breaks a record
    rule gives rows saying so (available false, the one-line reason) and the reason, never an exception."""
    labels = {f"{pool}/{ALL_PERIODS if period is None else period}": (period, ALL_PERIODS if period is None else period)
              for period in [None, *periods]}
    try:
        recordsets = recordsets_by(con, LANDED_TABLE, "landed_all_to_date",
                                   [(analysis, {"pool": pool, "period": period}) for analysis, (period, _) in labels.items()])
        result = estimate(recordsets, scheme=TREND_SCHEME, reps=reps)
    except (RecordError, ValueError) as err:
        reason = f"the landed {pool} logs cannot be pooled: {str(err).splitlines()[0]}"
        return _failed_rows(pool, [ALL_PERIODS, *periods], reps, reason), reason
    rows = estimates_table(result).to_pylist()
    for row in rows:
        row["period"], row["pool"] = labels[row.pop("analysis")][1], pool
    return rows, None


def _failed_rows(pool: str, labels: list[str], reps: int, reason: str) -> list[dict]:
    return [
        {"period": label, "pool": pool, "unit": unit, "metric": metric, "n": 0, "available": False,
         "status": "not_recoverable", "reason": reason, "scheme": TREND_SCHEME, "reps": reps}
        for label in labels for unit in UNITS for metric in METRICS
    ]  # fmt: skip


@dataclass(frozen=True)
class Trend:
    """The trend table, its pools and periods, and the one-line reason of each pool that failed."""

    table: pa.Table
    pools: list[str]
    periods: list[str]
    failed: list[str]


def trend_table(landed: pa.Table | None, reps: int = DEFAULT_REPS) -> Trend:
    """The authority gap on every landed log to date ('all') and per period, pooled by record level
    (and whether the proposal's global score is given), so that each pool is a valid record and reports
    what its level supports. No landed data gives an empty table with the trend's columns."""
    schema = _trend_schema(reps)
    if landed is None or landed.num_rows == 0:
        return Trend(schema.empty_table(), [], [], [])
    con = connect()
    con.register(LANDED_TABLE, landed)
    materialize(con, "landed_pooled", "landed_pooled")
    pool_periods: dict[str, list[str]] = {}
    for pool, period in con.execute(load_sql("landed_pool_periods")).fetchall():
        pool_periods.setdefault(pool, []).append(period)
    rows, failed = [], []
    for pool, periods in pool_periods.items():
        pooled, reason = _pool_rows(con, pool, periods, reps)
        if reason:
            failed.append(reason)
        rows.extend(pooled)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    periods = sorted({p for ps in pool_periods.values() for p in ps})
    return Trend(table, list(pool_periods), periods, failed)


def trend_plot_table(trend: pa.Table) -> pa.Table:
    """The trend as the plot reads it: one series per period, named with its pool when there are several."""
    pools = set(trend.column("pool").to_pylist())
    if len(pools) <= 1:
        return trend
    labels = [f"{period} ({pool})" for period, pool in zip(trend.column("period").to_pylist(), trend.column("pool").to_pylist())]
    return trend.set_column(trend.schema.get_field_index("period"), "period", pa.array(labels, pa.string()))
