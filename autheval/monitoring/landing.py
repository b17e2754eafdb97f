"""Landed role-separated logs: the recurring evaluation's input. A log is the AuthEval log schema plus
a `timestamp` (period = its month) or a `batch` column (period = the batch label).

Landing is keyed by content: a file's partition key is the start of the SHA-256 of its bytes, so each
distinct file lands exactly once, whatever its name and whatever Dagster instance watches the folder.
Nothing landed is ever overwritten: processed and rejected copies are stored as `<key>__<name>`, and a
file identical to one already landed or rejected is moved to `duplicates/` with a reason beside it.

A landed file is a copy: its bytes are read once, into a new file of the landing folder's own, hashed
as they are copied, and that copy is what is validated, landed and kept in processed/ (or rejected/), so
no other name for the dropped file (a hard link, a writer's open handle) can rewrite the record. A
symbolic link is never followed (landing reads nothing outside its folder): it is moved to rejected/
with the reason. A file that cannot be handled (unreadable, a name that is not UTF-8, a move that fails)
is set aside or skipped with a reason, never stopping the watcher for the other files; a name too long
to store beside its key is shortened (the key is kept).

Only complete files land. Writers should write to a temporary name the watcher ignores (a name starting
with `.`, or ending in `.tmp`, `.part` or `.partial`) and rename it in when done; and the watcher lands
a file only once it has seen the same size and modification time on two consecutive looks.

Corrections replace, never add. A site that re-exports a period it already sent (a corrected file)
declares it: a `supersedes` column naming, on every row, the content key of the file it replaces
(the 20 hex digits of `landed_records.landed_key`, also the start of its processed/<key>__<name>
copy). The correction lands as a partition of its own; the earlier partition stays in the lake (and
its copy in processed/), marked by its successor's `supersedes`, and no longer counts in the trend
or the monitor (landed_view). A file whose cases (site, period, case_id) were already landed by a file
that still counts, without declaring that it supersedes it, is refused in one line (moved to
rejected/ with the reason), as is a `supersedes` naming no landed file or one superseded already.

Core functions only (no Dagster): the lake's `landed_records` and `trend` assets and the landing sensor
call these."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from autheval.errors import RecordError
from autheval.estimation.estimators import DEFAULT_REPS, DEFAULT_SEEDS, METRICS, UNITS, EstimationResult, estimate
from autheval.estimation.study import estimates_table
from autheval.io import CSV_SUFFIXES, PARQUET_SUFFIXES, file_sha256, read_table
from autheval.records.datasets import StoredFiles, path_list, stored_files
from autheval.records.read import HELD_ROWS, records_from_table
from autheval.records.recordsets import recordsets_by
from autheval.records.schema import TRACE_TO_LOG, RecordSet, header_names
from autheval.vocabulary import name_problem
from warehouse.atomic import atomic_write_text, current_umask
from warehouse.lake import Lake
from warehouse.snapshots import SnapshotError
from warehouse.sql import connect, fill, load_sql, one, to_table

PERIOD_COLUMNS = ("timestamp", "batch")
DEPLOYMENT_COLUMNS = ("site", "model_version")  # where and by which model a log was made
SUPERSEDES = "supersedes"  # the content key of the earlier landed file a corrected file replaces
STRATUM_COLUMN = "risk_stratum"  # the service's own risk stratum of a case, where its log has one
UNSPECIFIED = "unspecified"  # the site or model version of a log without that column
POOLED = "all"  # the site or model version of rows pooled over every one (as period 'all')
LOCAL_COLUMN = "utility_proposed_local"
# whether the log itself gave the proposal's local score on a row (the canonical record fills it on an
# unchanged row), so that the record level of any subset of landed rows can be told (records/records_check.sql)
LOCAL_GIVEN = "proposed_local_given"
PROCESSED, REJECTED, DUPLICATES = "processed", "rejected", "duplicates"
LANDED_TABLE = "landed_records"
KEY_LENGTH = 20  # hex digits of the SHA-256 (80 bits) that name a landed file's partition
SEPARATOR = "__"  # processed/<key>__<original name>
TEMPORARY_SUFFIXES = (".tmp", ".part", ".partial")
ALL_PERIODS = "all"
TREND_SCHEME = "evaluator"
NAME_MAX = 255  # bytes in one file name (Linux, macOS, Windows)
# the longest name made from a stored one: a counter when the name is taken, the reason beside it, and
# the temporary name the reason is written under (warehouse.atomic: `.<name>.<8 characters>.tmp`)
STORED_NAME_MAX = NAME_MAX - len(f"9999{SEPARATOR}") - len(".reason.txt") - len("..12345678.tmp")
SHORTENED = "~"  # marks where a shortened stored name was cut
LINK_REASON = (
    "a symbolic link: landing stores real files only and never follows a link out of its "
    "folder; copy the file in (cp, or write and rename) instead of linking it"
)


class LandingChanged(RuntimeError):
    """A landed file changed between the look that keyed it and the read: not bad input, try later."""


def content_key(sha256: str) -> str:
    """The partition key of a landed file: the first KEY_LENGTH hex digits of its SHA-256."""
    return sha256[:KEY_LENGTH]


def is_log_name(name: str) -> bool:
    """A name the watcher considers: a CSV or Parquet log, not hidden and not a temporary name."""
    lower = name.lower()
    if name.startswith(".") or lower.endswith(TEMPORARY_SUFFIXES):
        return False
    return lower.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES)


def is_candidate(path: Path) -> bool:
    """A file the watcher considers: a log's name (is_log_name), and a regular file or a symbolic link
    (links are considered so that they are rejected, never followed)."""
    if not is_log_name(path.name):
        return False
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def landed_files(landing: Path) -> list[Path]:
    """Files waiting in the landing folder (CSV or Parquet, no temporary names), in name order."""
    if not landing.is_dir():
        return []
    return sorted(p for p in landing.iterdir() if is_candidate(p))


def stored_name(key: str, name: str) -> str:
    """`<key>__<name>`, the name shortened in the middle (its ending kept, SHORTENED where it was cut)
    when the stored name, a counter and `.reason.txt` would not fit in one file name."""
    full = f"{key}{SEPARATOR}{name}"
    if len(os.fsencode(full)) <= STORED_NAME_MAX:
        return full
    lower = name.lower()
    ending = next((s for s in CSV_SUFFIXES + PARQUET_SUFFIXES if lower.endswith(s)), "")
    ending = name[len(name) - len(ending) :]
    budget = STORED_NAME_MAX - len(os.fsencode(f"{key}{SEPARATOR}{SHORTENED}{ending}"))
    cut = os.fsencode(name[: len(name) - len(ending)])[:budget]
    head = cut.decode("utf-8", "ignore") if _is_utf8(name) else os.fsdecode(cut)
    return f"{key}{SEPARATOR}{head}{SHORTENED}{ending}"


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode keeps undecodable bytes as surrogates
        return False
    return True


def shown(name: str) -> str:
    """A file name as a reason or a table can hold it (bytes that are not UTF-8 shown as \\xNN)."""
    return name if _is_utf8(name) else os.fsencode(name).decode("utf-8", "backslashreplace")


def original_name(path: Path) -> str:
    """The name a file was dropped under (a stored copy is `<key>__<name>`; a shortened one gives the
    shortened name)."""
    head, sep, tail = path.name.partition(SEPARATOR)
    return tail if sep and len(head) == KEY_LENGTH and path.parent.name in (PROCESSED, REJECTED) else path.name


def _stored_copies(landing: Path, folder: str, key: str) -> list[Path]:
    where = landing / folder
    if where.is_symlink() or not where.is_dir():  # a link is never read through (see _own_folder)
        return []
    return sorted(p for p in where.glob(stored_name(key, "*")) if not p.name.endswith(".reason.txt"))


@dataclass(frozen=True)
class Landed:
    """A file found for a partition key: where it is, the name it was dropped under, its SHA-256.
    `source`: the dropped file `path` is a private copy of (None when `path` is the file itself), and
    `identity`: that file's (device, inode, size, mtime) when copied, so that it is removed only if it
    is still the file that was copied."""

    path: Path
    name: str
    sha256: str
    source: Path | None = None
    identity: tuple[int, int, int, int] | None = None

    @property
    def key(self) -> str:
        return content_key(self.sha256)

    @property
    def landing(self) -> Path:
        if self.source is not None:
            return self.source.parent
        return (
            self.path.parent.parent if self.path.parent.name in (PROCESSED, REJECTED, DUPLICATES) else self.path.parent
        )

    @property
    def label(self) -> str:
        """Where the file was dropped, as errors and metadata name it."""
        return str(self.source or self.path)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def copy_in(path: Path, landing: Path) -> Landed:
    """A private copy of the dropped file `path` in a new hidden folder of `landing`, hashed as it is
    written: the one read of the dropped bytes. A symbolic link is refused (OSError), never followed."""
    staging = Path(tempfile.mkdtemp(prefix=".landing-", suffix=".tmp", dir=landing))
    copy = staging / stored_name("0" * KEY_LENGTH, path.name)  # the real key is known once copied
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, "rb") as src, open(copy, "xb") as dst:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                raise OSError(f"{path}: not a regular file")
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
            identity = _identity(os.fstat(src.fileno()))
        os.chmod(copy, 0o666 & ~current_umask())
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    sha = digest.hexdigest()
    keyed = copy.with_name(stored_name(content_key(sha), path.name))
    os.rename(copy, keyed)
    return Landed(keyed, path.name, sha, path, identity)


def discard(found: Landed) -> None:
    """Remove what is left of a private copy (after a failed run); the dropped file stays."""
    if found.source is not None and found.path.parent.name.startswith(".landing-"):
        shutil.rmtree(found.path.parent, ignore_errors=True)


def _release(found: Landed) -> None:
    """Once its copy is stored: remove the dropped file if it is still the file copied (a file
    rewritten since is left to be looked at again), and the copy's hidden folder."""
    if found.source is None:
        return
    try:
        if _identity(found.source.lstat()) == found.identity:
            os.unlink(found.source)
    except FileNotFoundError:
        pass
    discard(found)


def locate(landing: Path, key: str, hint: str | None = None) -> Landed:
    """The file of partition `key`: its processed copy (a re-run), or a private copy (copy_in) of the
    waiting file whose content has this key (the file named `hint` is tried first). The content is
    checked, never assumed; links are skipped."""
    for path in _stored_copies(landing, PROCESSED, key):
        sha = file_sha256(path)
        if content_key(sha) == key:
            name = hint if hint and stored_name(key, hint) == path.name else original_name(path)
            return Landed(path, name, sha)
    waiting = [p for p in landed_files(landing) if not p.is_symlink()]
    if hint:
        waiting.sort(key=lambda p: p.name != hint)
    for path in waiting:
        try:
            if path.name != hint and content_key(file_sha256(path)) != key:
                continue
            found = copy_in(path, landing)
        except OSError:  # removed, unreadable or swapped for a link since it was listed
            continue
        if found.key == key:
            return found
        discard(found)
    raise FileNotFoundError(
        f"no landed file with content key {key!r} in {landing} or its {PROCESSED}/ folder "
        "(was it changed or removed after the sensor saw it?)"
    )


def already_handled(landing: Path, lake: Lake, key: str) -> str | None:
    """Why content `key` must not land again (landed, processed or rejected before), or None."""
    if lake.has_partition(LANDED_TABLE, key):
        return f"identical content already landed as partition {key} of {LANDED_TABLE}"
    for folder in (PROCESSED, REJECTED):
        copies = _stored_copies(landing, folder, key)
        if copies:
            return f"identical content already {folder}: {folder}/{shown(copies[0].name)}"
    return None


def read_landed(
    path: Path, key: str | None = None, name: str | None = None, sha256: str | None = None, source: str | None = None
) -> tuple[RecordSet, pa.Table]:
    """Validate a landed log; return its records and the canonical table with `period`,
    `landed_file` (the name it was dropped under), `landed_key` (its content key) and `record_level`
    columns. Raises RecordError (file, column, rule, example) on bad input, LandingChanged when the
    bytes read are not the bytes `sha256` names. `source`: the file as errors name it (default `path`;
    the dropped file when `path` is its private copy)."""
    sha256 = sha256 or file_sha256(path)
    key = key or content_key(sha256)
    name = name or original_name(path)
    source = source or str(path)
    try:
        raw = header_names(read_table(path), source)  # ' timestamp' is the period column too
    except RecordError as err:
        if source == str(path):
            raise
        raise RecordError(source, err.column, err.rule, err.example) from err
    if file_sha256(path) != sha256:
        raise LandingChanged(f"{source}: the file changed while it was being read; it will be looked at again")
    present = [c for c in PERIOD_COLUMNS if c in raw.column_names]
    if not present:
        raise RecordError(source, "timestamp", "a landed log needs a timestamp or a batch column")
    records = records_from_table(
        raw, source, key, sha256, used=(*PERIOD_COLUMNS, *DEPLOYMENT_COLUMNS, STRATUM_COLUMN, SUPERSEDES)
    )
    con = connect()
    n = raw.num_rows
    con.register(
        "landed_raw",
        pa.table(
            {
                "row_index": pa.array(range(n), pa.int64()),
                **{c: raw.column(c) if c in raw.column_names else pa.nulls(n, pa.string()) for c in PERIOD_COLUMNS},
            }
        ),
    )
    periods = con.execute(load_sql("recurring/landed_periods")).arrow().read_all()
    bad = pc.and_(pc.is_null(periods.column("period")), pc.is_valid(periods.column("period_source")))
    missing = pc.is_null(periods.column("period_source"))
    for mask, rule in ((bad, "must parse as a date or timestamp"), (missing, "must not be empty")):
        hits = pc.indices_nonzero(mask)
        if len(hits):
            first = hits[0].as_py()
            value = periods.column("period_source")[first].as_py()
            raise RecordError(source, present[0], rule, f"row {first + 1}, value {value!r}; {len(hits)} rows in all")
    if "batch" in present:  # a batch label names a period: ' b1' beside 'b1', or 'all', is refused
        _check_names(periods.column("period"), source, "batch")
    period = pc.take(periods.column("period"), records.table.column("row_index"))
    rows = records.table.num_rows
    table = records.table.append_column("period", period)
    for column, value in (("landed_file", name), ("landed_key", key), ("record_level", records.level)):
        table = table.append_column(column, pa.array([value] * rows, pa.string()))
    for column, values in _deployment(raw, source).items():
        table = table.append_column(column, pc.take(values, records.table.column("row_index")))
    local = LOCAL_COLUMN
    if records.schema == "trace":  # the column as the file names it
        local = next((k for k, v in TRACE_TO_LOG.items() if v == LOCAL_COLUMN), LOCAL_COLUMN)
    given = pc.is_valid(raw.column(local)) if local in raw.column_names else pa.chunked_array([pa.array([False] * n)])
    table = table.append_column(LOCAL_GIVEN, pc.take(given, records.table.column("row_index")))
    replaced = _supersedes(raw, source, key)
    return records, table.append_column(SUPERSEDES, pa.array([replaced] * table.num_rows, pa.string()))


def _supersedes(raw: pa.Table, source: str, key: str) -> str | None:
    """The content key a corrected file declares it replaces (its `supersedes` column: one key, the same
    on every row), or None when it has no such column."""
    if SUPERSEDES not in raw.column_names:
        return None
    values = pc.unique(raw.column(SUPERSEDES).cast(pa.string())).to_pylist()
    rule = (
        f"must name, on every row, the content key of the one landed file this file replaces ({KEY_LENGTH} "
        "lowercase hex digits: landed_records.landed_key, the start of its processed/<key>__<name> copy)"
    )
    if len(values) != 1 or not isinstance(values[0], str) or not _is_key(values[0]):
        shown_values = ", ".join(repr(v) for v in values[:3])
        raise RecordError(source, SUPERSEDES, rule, f"values {shown_values}" + (" ..." if len(values) > 3 else ""))
    if values[0] == key:
        raise RecordError(source, SUPERSEDES, "names this file's own content key", values[0])
    return values[0]


def _is_key(value: str) -> bool:
    return len(value) == KEY_LENGTH and all(c in "0123456789abcdef" for c in value)


def read_landed_table(lake: Lake) -> pa.Table | None:
    """Every landed partition, each read on its own and stacked by column name (a partition landed
    before a column existed has it null), or None when nothing has landed."""
    from warehouse.filesystem import read_parquet

    files = lake.table_files(LANDED_TABLE)
    if not files:
        return None
    return pa.concat_tables([read_parquet(lake.location, f) for f in files], promote_options="permissive")


def landed_table_files(lake: Lake) -> StoredFiles:
    """The lake's landed partitions as DuckDB reads them where they lie (none when nothing has landed),
    with their rows in all: what the monitor and the trend read (landed_view). Each partition's footer
    is read here, so a damaged one is one line naming it (SnapshotError), not the scanner's error."""
    paths = lake.present_files(LANDED_TABLE)
    rows = 0
    for path in paths:
        try:
            rows += pq.read_metadata(path, filesystem=lake.location.filesystem).num_rows
        except (OSError, pa.ArrowException) as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise SnapshotError(f"{path}: a landed partition cannot be read as Parquet: {message}") from None
    return replace(stored_files(lake.location, paths), rows=rows)


def landed_view(con, landed: pa.Table | StoredFiles, many_queries: bool = True) -> None:
    """The views landed_given (every landed row, with its deployment columns:
    sql/recurring/landed_given_view.sql) and landed_records (the landed logs that count, a superseded
    file's rows left out: sql/recurring/landed_records_view.sql) on `con`, over `landed`: the lake's
    landed Parquet files (landed_table_files), read where they lie by each query, so no copy of the
    landed rows is held; or rows held (an Arrow table). For a caller of `many_queries` (the monitor, the
    trend), files of up to HELD_ROWS rows in all are read once into a DuckDB table: many small
    partitions, each opened again by every query, were slower than the rows held (1,200 partitions of
    8 rows, the monitor: 27.6 s scanned, 6.3 s held in Arrow, 2.8 s read once). A caller of one query
    (a landing's check, the re-derivation's keys) reads the files where they lie."""
    if isinstance(landed, pa.Table):
        con.register("landed_source", landed)
    else:
        landed.register(con)
        held = many_queries and landed.rows is not None and landed.rows <= HELD_ROWS
        view = "landed_files" if held else "landed_source"
        files = path_list(landed.files)
        con.execute(fill("recurring/landed_source_files", identifiers={"view": view}, fragments={"files": files}))
        if held:
            con.execute(load_sql("recurring/landed_source_held"))
    con.execute(fill("recurring/landed_given_view", literals={"unspecified": UNSPECIFIED}))
    con.execute(load_sql("recurring/landed_records_view"))


def landed_sources(lake: Lake, landing: Path) -> list[Path]:
    """The processed copy of every landed partition, in an order that lands each correction after the
    file it supersedes (then by content key): what re-derives the landed logs on an empty lake. A
    partition whose copy is gone is left out (its re-derivation then differs, as it should). The landed
    keys are read where they lie (sql/recurring/landed_keys.sql), not the landed rows."""
    landed = landed_table_files(lake)
    if not len(landed):
        return []
    con = connect()
    landed_view(con, landed, many_queries=False)
    replaces: dict[str, str | None] = dict(con.execute(load_sql("recurring/landed_keys")).fetchall())

    def depth(key: str) -> int:
        seen = 0
        while replaces.get(key) and seen <= len(replaces):
            key, seen = replaces[key], seen + 1  # type: ignore[assignment]
        return seen

    found = []
    for key in sorted(replaces, key=lambda k: (depth(k), k)):
        copies = _stored_copies(landing, PROCESSED, key)
        if copies:
            found.append(copies[0])
    return found


CASE_KEY = ("landed_key", "landed_file", "site", "period", "case_id")


def check_landing(lake: Lake, table: pa.Table, source: str) -> None:
    """May `table` (a file read by read_landed) join the lake's landed logs? One RecordError line naming
    the file and the rule when its `supersedes` names no landed file or one superseded already, or when
    one of its cases (site, period, case_id: a site may number its cases anew each period) was landed
    before by a file that still counts and that it does not declare it supersedes (sql/recurring/landed_overlap.sql).
    The landed rows are read where they lie (landed_view), never held."""
    con = connect()
    landed = landed_table_files(lake)
    if len(landed):
        landed_view(con, landed, many_queries=False)
        con.table("landed_given").select(*CASE_KEY, SUPERSEDES).create_view("landed_before")
    else:
        con.register("landed_before", pa.table({c: pa.array([], pa.string()) for c in (*CASE_KEY, SUPERSEDES)}))
    con.register("landed_new", table.select(["site", "period", "case_id"]))
    replaced = table.column(SUPERSEDES)[0].as_py() if table.num_rows else None
    found = one(con, "recurring/landed_overlap", {"supersedes": replaced})
    broken = found["broken"]
    if broken == "supersedes":
        raise RecordError(source, SUPERSEDES, "names no landed file (landed_records.landed_key)", replaced)
    if broken == "superseded":
        raise RecordError(
            source,
            SUPERSEDES,
            f"names a file already superseded by {found['superseded_by']}: a further correction supersedes that one",
            replaced,
        )
    if broken == "case_id":
        raise RecordError(
            source,
            "case_id",
            f"already landed (site, period, case_id) in {found['landed_file']} (content key {found['clash_key']}): "
            f"a corrected re-export declares a `{SUPERSEDES}` column naming that key, else it is counted twice",
            f"site {found['site']!r}, period {found['period']!r}, case_id {found['case_id']!r}; "
            f"{found['clashes']} cases in all",
        )


def _deployment(raw: pa.Table, source: str) -> dict[str, pa.ChunkedArray]:
    """The site, model version and risk stratum of every row of a landed log, as text: a site or model
    version column must name one on every row ('unspecified' when the log has no such column; 'all' is
    the pooled rows' name); a risk stratum may be left empty."""
    n = raw.num_rows
    out = {}
    for column in (*DEPLOYMENT_COLUMNS, STRATUM_COLUMN):
        if column not in raw.column_names:
            value = None if column == STRATUM_COLUMN else UNSPECIFIED
            out[column] = pa.chunked_array([pa.array([value] * n, pa.string())])
            continue
        values = raw.column(column).cast(pa.string())
        if column == STRATUM_COLUMN:
            values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
        else:
            empty = pc.indices_nonzero(pc.fill_null(pc.equal(values, ""), True))
            if len(empty):
                first = empty[0].as_py()
                raise RecordError(
                    source,
                    column,
                    f"must not be empty (leave the column out and every row is {UNSPECIFIED!r})",
                    f"row {first + 1}, value {values[first].as_py()!r}; {len(empty)} rows in all",
                )
        _check_names(values, source, column)
        out[column] = values
    return out


def _check_names(values: pa.ChunkedArray, source: str, column: str) -> None:
    """Every name in `values` (a site, model version, risk stratum, batch; nulls skipped) kept to the one
    name rule (autheval.vocabulary.name_problem: not blank, no surrounding whitespace or control
    character, not the pooled rows' `all`), checked once per distinct value; one RecordError line."""
    for value in pc.unique(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values).to_pylist():
        rule = None if value is None else name_problem(value)
        if rule is None:
            continue
        hits = pc.indices_nonzero(pc.fill_null(pc.equal(values, value), False))
        raise RecordError(source, column, rule, f"row {hits[0].as_py() + 1}, value {value!r}; {len(hits)} rows in all")


def with_deployment_columns(landed: pa.Table) -> pa.Table:
    """`landed` with the site, model_version, risk_stratum and proposed_local_given columns (a partition
    landed before logs carried them: 'unspecified', no risk stratum, and the proposal's local score
    taken as given where the canonical row has one)."""
    n = landed.num_rows
    if LOCAL_GIVEN not in landed.column_names:
        landed = landed.append_column(LOCAL_GIVEN, pc.is_valid(landed.column(LOCAL_COLUMN)))
    for column in (*DEPLOYMENT_COLUMNS, STRATUM_COLUMN):
        if column not in landed.column_names:
            value = None if column == STRATUM_COLUMN else UNSPECIFIED
            landed = landed.append_column(column, pa.array([value] * n, pa.string()))
    return landed


def _own_folder(folder: Path) -> None:
    """Make processed/, rejected/ or duplicates/ where missing; one that is a symbolic link is refused
    (OSError naming it): landing never writes its records through a link out of its folder."""
    if folder.is_symlink():
        raise OSError(errno.ELOOP, f"{folder} is a symbolic link; landing keeps its records in folders of its own")
    folder.mkdir(parents=True, exist_ok=True)


def _move_no_clobber(path: Path, target: Path) -> Path:
    """Move `path` to `target`, or to `target` with a counter when that name is taken: never overwrite.
    A symbolic link is moved as the link."""
    _own_folder(target.parent)
    for n in range(1, 10_000):
        candidate = target if n == 1 else target.with_name(f"{n}{SEPARATOR}{target.name}")
        try:  # fails if the name exists: no window for a silent overwrite
            os.link(path, candidate, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links
            if candidate.exists() or candidate.is_symlink():
                continue
            os.replace(path, candidate)
            return candidate
        os.unlink(path)
        return candidate
    raise FileExistsError(f"no free name for {target}")


def set_aside(found: Landed | Path, reason: str, folder: str = REJECTED) -> Path:
    """Move a rejected (or duplicate) file to <landing>/<folder>/<key>__<name> with a .reason.txt
    beside it; nothing is lost and nothing is overwritten. A private copy is what is kept; the file
    it was copied from is removed (see _release)."""
    if isinstance(found, Path):
        found = Landed(found, found.name, file_sha256(found))
    target = _move_no_clobber(found.path, found.landing / folder / stored_name(found.key, found.name))
    atomic_write_text(target.with_name(target.name + ".reason.txt"), reason + "\n")
    _release(found)
    return target


def mark_processed(found: Landed) -> Path:
    """Store a landed file's copy as <landing>/processed/<key>__<name> (a processed copy stays where
    it is) and remove the dropped file."""
    if found.source is None and found.path.parent.name == PROCESSED:
        return found.path
    target = _move_no_clobber(found.path, found.landing / PROCESSED / stored_name(found.key, found.name))
    _release(found)
    return target


# --- the watcher: which waiting files are complete, new, or duplicates -------------------------------


@dataclass
class Tick:
    """What one look at the landing folder found: (key, name, run key) of each file to land (the run
    key names the content and the file's (size, mtime), so a later drop of content that never landed
    gets a run again), files still changing, duplicates and rejected files moved aside, files that
    could not be handled at all (one line each, left where they are), and the cursor for the next look."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    duplicates: list[Path] = field(default_factory=list)
    rejected: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cursor: str = "{}"


def _signature(path: Path) -> list[int] | None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _name_key(path: Path, why: str) -> str:
    """A key for a file set aside for what it is (a link, an unreadable file, its name), not for its
    content: from its name and signature, so that the same content under a good name still lands."""
    text = f"{why}\0{os.fsencode(path.name).hex()}\0{_signature(path)}"
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _reject(path: Path, why: str, tick: Tick) -> None:
    """Move `path` to rejected/ with the reason `why`, keyed by its name (see _name_key); when even
    that fails, leave it and say so in `tick.failed`: the other files are handled all the same."""
    name = shown(path.name)
    try:
        tick.rejected.append(set_aside(Landed(path, path.name, _name_key(path, why)), f"{name}: not landed: {why}"))
    except OSError as err:
        tick.failed.append(f"{name}: not landed: {why}; and it cannot be moved to {REJECTED}/: {err.strerror or err}")


def _look(path: Path, landing: Path, lake: Lake, previous: dict, seen: dict, requested: set, tick: Tick) -> None:
    """One waiting file's part of a look (see watch)."""
    if not _is_utf8(path.name):
        return _reject(path, "its name is not valid UTF-8 (rename it)", tick)
    if path.is_symlink():
        return _reject(path, LINK_REASON, tick)
    signature = _signature(path)
    if signature is None:
        return
    before = previous.get(path.name)
    if not before or before["signature"] != signature:
        seen[path.name] = {"signature": signature, "sha256": None}
        tick.waiting.append(path.name)
        return
    try:
        sha = before.get("sha256") or file_sha256(path)
    except FileNotFoundError:
        return
    except OSError as err:
        return _reject(path, f"it cannot be read: {err.strerror or err}", tick)
    if _signature(path) != signature:  # changed while hashed: look again next time
        seen[path.name] = {"signature": _signature(path), "sha256": None}
        tick.waiting.append(path.name)
        return
    seen[path.name] = {"signature": signature, "sha256": sha}
    key = content_key(sha)
    reason = already_handled(landing, lake, key)
    if reason:
        seen.pop(path.name)
        tick.duplicates.append(
            set_aside(Landed(path, path.name, sha), f"{path.name}: not landed again; {reason}", DUPLICATES)
        )
    elif key not in requested:  # a second identical waiting file is a duplicate once the first lands
        requested.add(key)
        tick.requests.append((key, path.name, f"{key}-{signature[0]}-{signature[1]}"))


def watch(landing: Path, lake: Lake, cursor: str | None) -> Tick:
    """One look at the landing folder. A file is complete when its (size, mtime) equal those of the
    previous look (the cursor); only then is it hashed and keyed. A complete file whose content was
    landed, processed or rejected before is moved to duplicates/ with a reason (side effect); a link,
    an unreadable file or a name that is not UTF-8 is moved to rejected/ with the reason; any other
    complete file is returned to be landed (one request per distinct content). A file that fails in
    any other way is reported in `failed` and looked at again next time; the others go on."""
    previous = json.loads(cursor).get("files", {}) if cursor else {}
    seen: dict[str, dict] = {}
    tick = Tick()
    linked = [landing / folder for folder in (PROCESSED, REJECTED, DUPLICATES) if (landing / folder).is_symlink()]
    if linked:  # nothing is handled: every file would be kept (or read) through the link
        tick.failed.append(
            f"{linked[0]}: a symbolic link; landing keeps its records in folders of its own (no file handled)"
        )
        tick.cursor = cursor or "{}"
        return tick
    requested: set[str] = set()
    for path in landed_files(landing):
        try:
            _look(path, landing, lake, previous, seen, requested, tick)
        except OSError as err:
            seen.pop(path.name, None)
            tick.failed.append(f"{shown(path.name)}: not handled this time: {err.strerror or err}")
    tick.cursor = json.dumps({"files": seen}, sort_keys=True)
    return tick


# --- the trend: every landed log to date and per period, pooled by what the records support ----------


def _trend_schema(reps: int) -> pa.Schema:
    empty = estimates_table(EstimationResult(TREND_SCHEME, reps, DEFAULT_SEEDS[TREND_SCHEME], (0.025, 0.975), {}))
    fields = [f for f in empty.schema if f.name != "analysis"]
    return pa.schema([pa.field(name, pa.string()) for name in (*DEPLOYMENT_COLUMNS, "period", "pool")] + fields)


def empty_trend(reps: int = DEFAULT_REPS) -> pa.Table:
    """The trend table before anything has landed: no rows, the right columns."""
    return _trend_schema(reps).empty_table()


Slice = tuple[str, str]  # (site, model_version); POOLED in either place: pooled over every one


def _pool_rows(con, pool: str, slices: dict[Slice, list[str]], reps: int) -> tuple[list[dict], str | None]:
    """Estimate one pool: for each slice (every site and version, each site, each site x version), all
    its periods to date, then each period. Slices holding the same records (a site with one version)
    are estimated once. A pooling that breaks a record rule gives rows saying so (available false, the
    one-line reason) and the reason, never an exception."""
    labels = {}
    for (site, version), periods in slices.items():
        for period in [None, *periods]:
            shown_period = ALL_PERIODS if period is None else period
            labels[f"{pool}/{site}/{version}/{shown_period}"] = (site, version, period, shown_period)
    groups = [
        (
            analysis,
            {
                "pool": pool,
                "period": period,
                "site": None if site == POOLED else site,
                "model_version": None if version == POOLED else version,
            },
        )
        for analysis, (site, version, period, _) in labels.items()
    ]
    try:
        recordsets = recordsets_by(con, LANDED_TABLE, "recurring/landed_all_to_date", groups)
        distinct: dict[str, RecordSet] = {}
        for records in recordsets:
            distinct.setdefault(records.data_sha256, records)
        result = estimate(list(distinct.values()), scheme=TREND_SCHEME, reps=reps)
    except (RecordError, ValueError) as err:
        reason = f"the landed {pool} logs cannot be pooled: {str(err).splitlines()[0]}"
        return _failed_rows(pool, labels.values(), reps, reason), reason
    by_analysis: dict[str, list[dict]] = {}
    for row in estimates_table(result).to_pylist():
        by_analysis.setdefault(row.pop("analysis"), []).append(row)
    rows = []
    for records in recordsets:  # in label order; a slice with the same records as another copies its rows
        site, version, _, shown_period = labels[records.analysis]
        for row in by_analysis[distinct[records.data_sha256].analysis]:
            rows.append(
                {
                    **row,
                    "site": site,
                    "model_version": version,
                    "period": shown_period,
                    "pool": pool,
                    "source": records.source,
                }
            )
    return rows, None


def _failed_rows(pool: str, labels, reps: int, reason: str) -> list[dict]:
    return [
        {
            "site": site,
            "model_version": version,
            "period": label,
            "pool": pool,
            "unit": unit,
            "metric": metric,
            "n": 0,
            "available": False,
            "status": "not_recoverable",
            "reason": reason,
            "scheme": TREND_SCHEME,
            "reps": reps,
        }
        for site, version, _, label in labels
        for unit in UNITS
        for metric in METRICS
    ]


@dataclass(frozen=True)
class Trend:
    """The trend table, its pools and periods, and the one-line reason of each pool that failed."""

    table: pa.Table
    pools: list[str]
    periods: list[str]
    failed: list[str]


def trend_table(landed: pa.Table | StoredFiles | None, reps: int = DEFAULT_REPS) -> Trend:
    """The authority gap on every landed log to date ('all') and per period, pooled by record level
    (and whether the proposal's global score is given), so that each pool is a valid record and reports
    what its level supports; within a pool, over every site and model version (site and model_version
    'all'), per site ('<site>', 'all') and per site x model version. No landed data gives an empty
    table with the trend's columns."""
    schema = _trend_schema(reps)
    if landed is None or len(landed) == 0:
        return Trend(schema.empty_table(), [], [], [])
    con = connect()
    landed_view(con, landed)
    to_table(con, "landed_pooled", "recurring/landed_pooled")
    pool_slices: dict[str, dict[Slice, list[str]]] = {}
    for pool, site, version, period in con.execute(load_sql("recurring/landed_pool_periods")).fetchall():
        pool_slices.setdefault(pool, {}).setdefault((site, version), []).append(period)
    rows, failed = [], []
    for pool, slices in pool_slices.items():
        pooled, reason = _pool_rows(con, pool, slices, reps)
        if reason:
            failed.append(reason)
        rows.extend(pooled)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    periods = sorted({p for slices in pool_slices.values() for p in slices[(POOLED, POOLED)]})
    return Trend(table, list(pool_slices), periods, failed)


def trend_plot_table(trend: pa.Table) -> pa.Table:
    """The trend as the plot reads it: the rows over every site and model version, one series per
    period, named with its pool when there are several."""
    if "site" in trend.column_names:
        pooled = pc.and_(pc.equal(trend.column("site"), POOLED), pc.equal(trend.column("model_version"), POOLED))
        trend = trend.filter(pooled).drop_columns(list(DEPLOYMENT_COLUMNS))
    pools = set(trend.column("pool").to_pylist())
    if len(pools) <= 1:
        return trend
    labels = [
        f"{period} ({pool})"
        for period, pool in zip(trend.column("period").to_pylist(), trend.column("pool").to_pylist())
    ]
    return trend.set_column(trend.schema.get_field_index("period"), "period", pa.array(labels, pa.string()))
