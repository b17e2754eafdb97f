"""The DuckDB catalog: a small database file of views over the lake's Parquet files.

DuckDB allows one writer per file and a reader cannot open a file a writer holds, so the catalog is
never written in place: it is rebuilt in a temporary file and renamed over the old one (publish).
Readers open it read-only and keep the snapshot they opened.

The views name their files relative to the lake folder (the session variable `autheval_lake` gives the
root), so a copied lake serves its own data and a moved or unpacked one still works.

Read-only access (`connect_readonly`, `stream`, `query`) is enforced by DuckDB itself, not by looking
at the text: the parser must find exactly one SELECT (or EXPLAIN) statement, and the connection runs
with external access disabled except for the lake folder and a locked configuration, so nothing it
runs can write a file, change a setting, load an extension or read outside the lake.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from warehouse.atomic import atomic_path
from warehouse.lake import Lake
from warehouse.sql import duckdb_memory_limit, load_sql, quote_identifier, quote_literal

CATALOG_NAME = "autheval.duckdb"
READ_STATEMENTS = ("SELECT", "EXPLAIN")  # DESCRIBE, SHOW, SUMMARIZE, FROM-first and VALUES parse as SELECT
BATCH_ROWS = 65_536


class QueryRefused(ValueError):
    """A query that is not one read-only statement over the lake; `str(err)` is one line."""


def catalog_path(lake: Lake) -> Path:
    return lake.root / CATALOG_NAME


def _set_lake_variable(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    con.execute("SET VARIABLE autheval_lake = ?", [str(lake.root)])


def publish_catalog(lake: Lake) -> Path:
    """Rebuild the catalog with one view per lake table; atomic (temp file, then rename)."""
    target = catalog_path(lake)
    template = load_sql("catalog_view")
    with atomic_path(target) as tmp:
        tmp.unlink()  # DuckDB creates the file itself
        con = duckdb.connect(str(tmp))
        try:
            _set_lake_variable(con, lake)  # views bind when created, so the files must be found now
            for name, location in lake.tables().items():
                relative = Path(location).relative_to(lake.root).as_posix()
                # View DDL cannot take bound parameters: the name is a checked identifier and the
                # path a quoted literal (warehouse.sql.quote_*).
                con.execute(
                    template.replace("{table}", quote_identifier(name)).replace(
                        "{location}", quote_literal(relative)
                    )
                )
            con.execute("CHECKPOINT")
        finally:
            con.close()
        for leftover in tmp.parent.glob(tmp.name + ".wal"):
            leftover.unlink()
    return target


def connect_readonly(lake: Lake) -> duckdb.DuckDBPyConnection:
    """Open the catalog read-only, with file access limited to the lake folder and settings locked.

    For notebooks too: the views resolve against this lake's folder wherever it now lives."""
    path = catalog_path(lake)
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path}: run `autheval demo` (or publish the lake) first")
    con = duckdb.connect(str(path), read_only=True, config={
        "autoload_known_extensions": False,
        "autoinstall_known_extensions": False,
        "memory_limit": duckdb_memory_limit(),
    })
    try:
        _set_lake_variable(con, lake)
        # allowed_directories is matched before DuckDB resolves relative paths, so only the absolute
        # lake root is allowed; `..` out of it is refused by DuckDB.
        con.execute("SET allowed_directories = ?", [[str(lake.root) + os.sep]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything but one read-only statement, as DuckDB's own parser classifies it."""
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
        raise QueryRefused(f"query: only a read-only SELECT (or WITH ... SELECT, DESCRIBE, SHOW) is allowed; "
                           f"this is a {kind} statement")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def stream(lake: Lake, sql: str, params=None, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Run one read-only statement over the catalog and yield its result in record batches (memory
    stays bounded whatever the result size). Raises QueryRefused (one line) on a refused or failed query."""
    con = connect_readonly(lake)
    try:
        check_read_only(con, sql)
        try:
            reader = con.execute(sql, params or []).to_arrow_reader(batch_rows)
            yield from _batches(reader)
        except duckdb.PermissionException as err:
            raise QueryRefused(f"query: {_first_line(err)} (file access is limited to the lake {lake.root})") from err
        except duckdb.Error as err:
            raise QueryRefused(f"query: {_first_line(err)}") from err
    finally:
        con.close()


def _batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    empty = True
    for batch in reader:
        empty = False
        yield batch
    if empty:  # keep the column names of an empty result
        yield pa.RecordBatch.from_pylist([], schema=reader.schema)


def query(lake: Lake, sql: str, params=None) -> pa.Table:
    """Run one read-only statement over the catalog and return the whole result (small results)."""
    batches = list(stream(lake, sql, params))
    return pa.Table.from_batches(batches, schema=batches[0].schema)
