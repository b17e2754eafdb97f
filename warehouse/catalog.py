"""The DuckDB catalog: a small database file of views over the lake's Parquet files.

DuckDB allows one writer per file and a reader cannot open a file a writer holds, so the catalog is
never written in place: it is rebuilt in a temporary file and renamed over the old one (publish).
Readers open it read-only and keep the snapshot they opened.

The views name their files relative to the lake folder (the session variable `autheval_lake` gives the
root), so a copied lake serves its own data and a moved or unpacked one still works.

Read-only access (`connect_readonly`, `stream`, `query`) is enforced by DuckDB itself, not by looking
at the text: the parser must find exactly one SELECT (or EXPLAIN of a SELECT) statement, and the
connection runs with external access disabled except for the files its views read, a locked
configuration and its spill outside the lake, so nothing it runs can write into the lake, change a
setting, load an extension or read anything else.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePath

import duckdb
import pyarrow as pa

from warehouse import snapshots
from warehouse.catalog_build import (
    CATALOG_NAME,
    build_catalog,
    link_served_catalog,
    snapshot_catalog_path,
    write_catalog,
)
from warehouse.lake import Lake
from warehouse.snapshots import committed_snapshots, keep_snapshots
from warehouse.sql import declared_size, duckdb_memory_limit, load_sql

READ_STATEMENTS = ("SELECT", "EXPLAIN")  # DESCRIBE, SHOW, SUMMARIZE, FROM-first and VALUES parse as SELECT
BATCH_ROWS = 65_536


class QueryRefused(ValueError):
    """A query that is not one read-only statement over the lake; `str(err)` is one line."""


def catalog_path(lake: Lake) -> Path:
    """The served catalog, or the kept catalog of the snapshot a pinned lake reads."""
    lake.snapshot()  # a committed, kept snapshot, or SnapshotError (a lost or corrupt pointer, no such snapshot)
    if lake.pinned is not None:
        return snapshot_catalog_path(lake.root, lake.pinned)
    return Path(lake.root) / CATALOG_NAME  # a local file, as snapshot_catalog_path's (none on an object store)


def _set_lake_variable(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    con.execute("SET VARIABLE autheval_lake = ?", [str(lake.root)])


def publish_catalog(lake: Lake) -> Path:
    """Serve a catalog of the lake's current snapshot (a lake written before snapshots, or one whose
    served catalog was removed); commits publish their own (`build_catalog`)."""
    manifest = lake.snapshot()
    if manifest.snapshot == 0:
        return write_catalog(lake.root, manifest, catalog_path(lake), [manifest])
    build_catalog(
        lake.root, manifest, manifest.snapshot, keep_snapshots(lake.keep_snapshots), committed_snapshots(lake.location)
    )
    return link_served_catalog(lake.root, manifest.snapshot)


class CatalogError(ValueError):
    """A catalog that cannot be opened (corrupt, truncated, not a DuckDB file); `str(err)` is one line."""


# Table functions whose first argument names the files a view reads (the catalog uses read_parquet).
FILE_READERS = frozenset(
    {
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_text",
        "read_blob",
    }
)
GLOB_CHARS = frozenset("*?[")
READ_ROWS = 512  # rows per batch DuckDB converts: small, so that wide rows make a small batch
BATCH_BYTES = 16 << 20  # a yielded batch holds at most about this many bytes (or one row)
# DuckDB sizes its streaming buffer by 16 bytes a string, not by the characters: the default 976 KiB
# held about 60k rows of any width (so rows of long strings buffered gigabytes whole before the first
# batch); 32 KiB is about one vector of them.
STREAM_BUFFER = "32KB"
SPILL_ENV = "AUTHEVAL_QUERY_SPILL"  # the spill cap of query connections, any DuckDB size ('20GB')
SPILL_CAP = 4 << 30  # default cap, and at most half of the free space where the spill goes
SPILL_PREFIX = "autheval-query-spill-"
_spill_folders: dict[int, Path] = {}
_running: set = set()  # the connections `stream` is reading from, for interrupt_queries


def connect_readonly(lake: Lake) -> duckdb.DuckDBPyConnection:
    """Open the catalog read-only: the only lake files it may open are those its views read, settings
    are locked, and what a large sort spills goes to a capped temporary folder outside the lake.

    The connection opens a private copy of the catalog (removed at once; the open file stays readable):
    DuckDB allows an attached database's own path even with external access off, and the lake's
    catalog must not be that path. For notebooks too: the views resolve against this lake's folder
    wherever it now lives. What it cannot stop alone is a statement rewriting a file a view reads in
    place; `stream` and `query` refuse every statement that writes before it runs (check_read_only)."""
    path = catalog_path(lake)
    if path.is_symlink():
        raise CatalogError(f"query: the catalog {path} is a symbolic link; a lake's catalog is never followed out")
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path}: run `autheval demo` (or publish the lake) first")
    spill = _spill_folder()
    try:
        private = _private_copy(path, spill)
    except OSError as err:
        raise CatalogError(f"query: cannot read the catalog {path}: {err.strerror or err}") from err
    try:
        con = duckdb.connect(
            str(private),
            read_only=True,
            config={
                "autoload_known_extensions": False,
                "autoinstall_known_extensions": False,
                "memory_limit": duckdb_memory_limit(),
                # the default is <catalog>.tmp, inside the lake, capped only at 90% of the disk
                "temp_directory": str(spill),
                "max_temp_directory_size": _spill_cap(spill),
                # 64-bit offsets: a batch of long strings past 2 GB is no error (stream narrows it again)
                "arrow_large_buffer_size": True,
            },
        )
    except duckdb.Error as err:
        line = _first_line(err).replace(str(private), str(path))
        raise CatalogError(f"query: cannot open the catalog {path}: {line}") from err
    finally:
        _remove_private(private)
    try:
        _set_lake_variable(con, lake)
        # DuckDB's allow-lists do not tell reading from writing (allowed_directories = [lake] lets a
        # statement write anywhere in the lake), so only the files the views read are allowed.
        readable = _view_files(con, lake)
        if readable:
            con.execute("SET allowed_paths = ?", [readable])
        con.execute("SET streaming_buffer_size = ?", [STREAM_BUFFER])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except duckdb.Error as err:
        con.close()
        raise CatalogError(f"query: cannot open the catalog {path}: {_first_line(err)}") from err
    except BaseException:
        con.close()
        raise
    return con


def _spill_folder() -> Path:
    """This process's private folder (mode 700) under the system's temporary folder, for spill and
    catalog copies; DuckDB empties it on close, it is removed at exit, and a killed process's folder
    is removed by the next process that opens the catalog."""
    import atexit
    import tempfile

    pid = os.getpid()
    if pid not in _spill_folders:
        _remove_stale_spill(Path(tempfile.gettempdir()))
        _spill_folders[pid] = Path(tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{pid}-"))
        atexit.register(shutil.rmtree, _spill_folders[pid], ignore_errors=True)
    _spill_folders[pid].mkdir(mode=0o700, exist_ok=True)  # removed meanwhile (another pid namespace)
    return _spill_folders[pid]


def _remove_stale_spill(base: Path) -> None:

    for folder in base.glob(SPILL_PREFIX + "*"):
        pid = folder.name[len(SPILL_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive under another user, or gone meanwhile
            continue


def _private_copy(path: Path, spill: Path) -> Path:
    """A copy of the catalog, under its own name (DuckDB names the database after the file)."""
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="catalog-", dir=spill)) / path.name
    shutil.copyfile(path, copy)
    return copy


def _remove_private(copy: Path) -> None:
    for leftover in (copy, copy.parent):
        try:
            leftover.rmdir() if leftover.is_dir() else leftover.unlink()
        except OSError:
            pass


def _spill_cap(spill: Path) -> str:
    """AUTHEVAL_QUERY_SPILL, else SPILL_CAP or half the free space there, whichever is less."""

    declared = declared_size(SPILL_ENV, minimum=0)
    if declared:
        return declared
    existing = next(p for p in (spill, *spill.parents) if p.exists())
    return f"{min(SPILL_CAP, shutil.disk_usage(existing).free // 2) >> 20}MiB"


def _view_files(con: duckdb.DuckDBPyConnection, lake: Lake) -> list[str]:
    """The paths the catalog's views read (each glob as written and the files it matches now), as
    DuckDB itself evaluates the views' path arguments; only paths inside the lake. A view whose
    arguments cannot be read gets no files (its queries are refused, never widened)."""
    import json

    sources = []
    for (definition,) in con.execute(load_sql("warehouse/catalog_view_definitions")).fetchall():
        try:
            sources += _reader_arguments(con, _view_body(definition))
        except duckdb.Error:
            continue
    if not sources:
        return []
    row = con.execute("SELECT json_serialize_sql('SELECT NULL')").fetchone()
    assert row is not None  # a SELECT without FROM: one row
    (template,) = row
    statement = json.loads(template)
    statement["statements"][0]["node"]["select_list"] = sources
    row = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(statement)]).fetchone()
    assert row is not None  # a SELECT without FROM: one row
    (select,) = row
    # evaluated on a connection with no file access at all: the arguments only compute path strings
    evaluate = duckdb.connect(config={"enable_external_access": False, "autoload_known_extensions": False})
    try:
        _set_lake_variable(evaluate, lake)
        values = evaluate.execute(select).fetchone()
        assert values is not None  # a SELECT without FROM: one row
    finally:
        evaluate.close()
    paths = [p for value in values for p in (value if isinstance(value, list) else [value]) if isinstance(p, str)]
    return sorted({found for p in paths for found in _matches(p) if _inside(found, lake.root)})


def _view_body(definition: str) -> str:
    """`CREATE VIEW name AS <select>` -> `<select>`: the text after the first AS keyword token."""
    for position, kind in duckdb.tokenize(definition):
        if (
            kind == duckdb.token_type.keyword
            and definition[position : position + 2].upper() == "AS"
            and not definition[position + 2 : position + 3].isalnum()
        ):
            return definition[position + 2 :].strip().rstrip(";")
    return ""


def _reader_arguments(con: duckdb.DuckDBPyConnection, select: str) -> list[dict]:
    """The parsed first argument of every file-reading table function in a SELECT (DuckDB's AST)."""
    import json

    row = con.execute("SELECT json_serialize_sql(?)", [select]).fetchone()
    assert row is not None  # a SELECT without FROM: one row
    (serialized,) = row
    found: list[dict] = []

    def walk(node):
        if isinstance(node, dict):
            function = node.get("function") if node.get("type") == "TABLE_FUNCTION" else None
            if (
                isinstance(function, dict)
                and str(function.get("function_name", "")).lower() in FILE_READERS
                and function.get("children")
            ):
                found.append(function["children"][0])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    tree = json.loads(serialized)
    if not tree.get("error"):
        walk(tree["statements"])
    return found


def _matches(path: str) -> list[str]:
    """A path as written, and for a glob also the files it matches now (DuckDB checks both)."""
    import glob

    if not GLOB_CHARS & set(path):
        return [path]
    return [path, *sorted(glob.glob(path, recursive="**" in path))]


def _inside(path: str, root: PurePath) -> bool:
    """An absolute path inside the lake once links and `..` are resolved."""
    if not os.path.isabs(path):
        return False
    real_root = os.path.realpath(root)
    return os.path.realpath(path).startswith(real_root.rstrip(os.sep) + os.sep)


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything but one read-only statement, as DuckDB's own parser classifies it; an EXPLAIN
    only of a SELECT (EXPLAIN ANALYZE runs the statement it explains)."""
    if not sql or not sql.strip():
        raise QueryRefused("query: the query is empty")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as err:
        raise QueryRefused(f"query: {_first_line(err)}") from err
    if not statements:
        raise QueryRefused("query: the query is empty (only comments or semicolons)")
    if len(statements) > 1:
        raise QueryRefused(f"query: one statement only; found {len(statements)} (separated by ';')")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        raise QueryRefused(
            f"query: only a read-only SELECT (or WITH ... SELECT, DESCRIBE, SHOW) is allowed; "
            f"this is a {kind} statement"
        )
    if kind == "EXPLAIN":
        explained = _explained_kind(con, statements[0].query)
        if explained != "SELECT":
            raise QueryRefused(
                f"query: only a SELECT may be explained (EXPLAIN ANALYZE runs the statement it "
                f"explains); this explains {explained}"
            )


def _explained_kind(con: duckdb.DuckDBPyConnection, text: str) -> str:
    """What `EXPLAIN [ANALYZE] [(options)] statement` explains, as DuckDB parses the statement:
    "SELECT", "a COPY statement", ... The text after EXPLAIN [ANALYZE] is tried whole first (it may be
    a parenthesized SELECT), then after an option list; an option list holds only words and commas."""
    tokens = duckdb.tokenize(text)
    starts = [position for position, _ in tokens]
    words = [_token_word(text, tokens, i) for i in range(len(tokens))]
    if not words or words[0].upper() != "EXPLAIN":
        return "a statement this guard cannot read"
    first = 2 if len(words) > 1 and words[1].upper() in ("ANALYZE", "ANALYSE") else 1
    candidates = [first]
    if first < len(words) and words[first] == "(":
        close = next(
            (i for i in range(first + 1, len(words)) if tokens[i][1] == duckdb.token_type.operator and words[i] != ","),
            None,
        )
        if close is not None and words[close] == ")":
            candidates.append(close + 1)
    kinds = []
    for start in candidates:
        if start >= len(starts):
            continue
        try:
            inner = con.extract_statements(text[starts[start] :])
        except duckdb.Error:
            continue
        if len(inner) == 1:
            kinds.append(inner[0].type.name)
    if "SELECT" in kinds:
        return "SELECT"
    return f"a {kinds[0]} statement" if kinds else "a statement that is not a SELECT"


def _token_word(text: str, tokens: list, i: int) -> str:
    """Token i's text: an operator's first character, else the characters up to a space or comment."""
    start = tokens[i][0]
    end = tokens[i + 1][0] if i + 1 < len(tokens) else len(text)
    if tokens[i][1] == duckdb.token_type.operator:
        return text[start]
    word = text[start:end].split(None, 1)[0] if text[start:end].strip() else ""
    return word.split("/*", 1)[0].split("--", 1)[0]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _check_served_whole(lake: Lake) -> None:
    """After a failed query: QueryRefused naming a file of the snapshot read that is missing, if one is."""
    try:
        snapshots.check_whole(lake.location, lake.snapshot())
    except snapshots.SnapshotError as err:
        raise QueryRefused(str(err)) from None


def stream(
    lake: Lake, sql: str, params=None, batch_rows: int = BATCH_ROWS, batch_bytes: int = BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """Run one read-only statement over the catalog and yield its result in record batches of at most
    `batch_rows` rows and about `batch_bytes` bytes (memory stays bounded whatever the result size and
    width). Raises QueryRefused or CatalogError (one line) on a refused or failed query, and
    KeyboardInterrupt on Ctrl-C (DuckDB reports it as RuntimeError('Query interrupted'))."""
    con = connect_readonly(lake)
    _running.add(con)
    try:
        check_read_only(con, sql)
        try:
            reader = con.execute(sql, params or []).to_arrow_reader(min(READ_ROWS, batch_rows))
            yield from _bounded(reader, batch_rows, batch_bytes)
        except duckdb.PermissionException as err:
            _check_served_whole(lake)  # a file of the snapshot gone reads as a refused access: say which
            raise QueryRefused(
                f"query: {_first_line(err)} (file access is limited to the files of the "
                f"lake {lake.root} that its catalog's views read)"
            ) from err
        except duckdb.InterruptException as err:
            raise KeyboardInterrupt from err
        except duckdb.OutOfMemoryException as err:
            raise QueryRefused(
                f"query: {_first_line(err)} (memory and spill are capped: raise AUTHEVAL_DUCKDB_MEMORY or {SPILL_ENV})"
            ) from err
        except duckdb.Error as err:
            _check_served_whole(lake)
            raise QueryRefused(f"query: {_first_line(err)}") from err
        except (RuntimeError, OSError) as err:  # Ctrl-C inside DuckDB; an error mid-stream through Arrow
            if "interrupted" in str(err).lower():
                raise KeyboardInterrupt from err
            raise QueryRefused(f"query: {_first_line(err)}") from err
    finally:
        # A query left running (Ctrl-C, a reader that stopped early) is stopped first: DuckDB's own
        # "Query interrupted" leaves its worker threads running, and close would wait for them.
        con.interrupt()
        _running.discard(con)
        con.close()


def interrupt_queries() -> None:
    """Stop what `stream` is running in this process; safe from any thread. For Ctrl-C: DuckDB looks
    for a pending signal only between its tasks, and one task can run for minutes."""
    for con in list(_running):
        con.interrupt()


def _bounded(reader: pa.RecordBatchReader, max_rows: int, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """The reader's rows again, in batches of at most max_rows rows and about max_bytes bytes (Arrow's
    size of the data): narrow batches joined, wide ones sliced, types back to 32-bit offsets."""
    schema = _narrow_schema(reader.schema)
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    empty = True
    for batch in reader:
        step = max(1, batch.num_rows * max_bytes // batch.nbytes) if batch.nbytes > max_bytes else batch.num_rows
        for start in range(0, batch.num_rows, max(step, 1)):
            piece = batch.slice(start, step)
            if pending and (rows + piece.num_rows > max_rows or size + piece.nbytes > max_bytes):
                yield _narrow(pending, schema)
                empty = False
                pending, rows, size = [], 0, 0
            pending.append(piece)
            rows += piece.num_rows
            size += piece.nbytes
    if pending or empty:  # an empty result keeps its column names
        yield _narrow(pending, schema) if pending else pa.RecordBatch.from_pylist([], schema=schema)


def _narrow(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # one value past 2 GB: keep 64-bit offsets
        return batch


def _narrow_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_type(_narrow_type(field.type)) for field in schema], metadata=schema.metadata)


def _narrow_type(kind: pa.DataType) -> pa.DataType:
    """The type with string, binary and list offsets in 32 bits (what callers and Parquet expect)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_large_list(kind) or pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_narrow_type(kind.value_type)))
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_narrow_type(kind.value_type)), kind.list_size)
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_narrow_type(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(_narrow_type(kind.key_type)),
            kind.item_field.with_type(_narrow_type(kind.item_type)),
            kind.keys_sorted,
        )
    return kind


def query(lake: Lake, sql: str, params=None) -> pa.Table:
    """Run one read-only statement over the catalog and return the whole result (small results)."""
    batches = list(stream(lake, sql, params))
    return pa.Table.from_batches(batches, schema=batches[0].schema)
