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
import shutil
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from warehouse.atomic import atomic_path
from warehouse.lake import Lake
from warehouse.snapshots import SNAPSHOTS, committed_snapshots, keep_snapshots
from warehouse.sql import duckdb_memory_limit, load_sql, quote_identifier, quote_literal

CATALOG_NAME = "autheval.duckdb"
READ_STATEMENTS = ("SELECT", "EXPLAIN")  # DESCRIBE, SHOW, SUMMARIZE, FROM-first and VALUES parse as SELECT
BATCH_ROWS = 65_536


class QueryRefused(ValueError):
    """A query that is not one read-only statement over the lake; `str(err)` is one line."""


def catalog_path(lake: Lake) -> Path:
    """The served catalog, or the kept catalog of the snapshot a pinned lake reads."""
    if lake.pinned is not None:
        path = snapshot_catalog_path(lake.root, lake.pinned)
        if not path.exists():
            lake.snapshot()  # raises SnapshotError naming the kept snapshots
        return path
    return lake.root / CATALOG_NAME


def _set_lake_variable(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    con.execute("SET VARIABLE autheval_lake = ?", [str(lake.root)])


def publish_catalog(lake: Lake) -> Path:
    """Serve a catalog of the lake's current snapshot (a lake written before snapshots, or one whose
    served catalog was removed); commits publish their own (`build_catalog`)."""
    manifest = lake.snapshot()
    if manifest.snapshot == 0:
        return _build(lake.root, manifest, catalog_path(lake), [manifest])
    build_catalog(lake.root, manifest, manifest.snapshot, keep_snapshots(lake.keep_snapshots))
    return link_served_catalog(lake.root, manifest.snapshot)


def snapshot_catalog_path(root: Path, number: int) -> Path:
    return Path(root) / SNAPSHOTS / f"{number:08d}.duckdb"


def build_catalog(root: Path, manifest, number: int, keep: int) -> Path:
    """Write snapshot `number`'s catalog (views over exactly its files, and the `lake_snapshots`
    table of the `keep` snapshots kept with it) to snapshots/<number>.duckdb; atomic (temp file, then
    rename)."""
    earlier = [m for m in committed_snapshots(Lake(root).location) if m.snapshot < number]
    kept = earlier[len(earlier) - keep + 1:] if keep > 1 else []
    kept.append(manifest)
    return _build(Path(root), manifest, snapshot_catalog_path(root, number), kept)


def _build(root: Path, manifest, target: Path, kept: list) -> Path:
    template = load_sql("catalog_view")
    with atomic_path(target) as tmp:
        tmp.unlink()  # DuckDB creates the file itself
        con = duckdb.connect(str(tmp))
        try:
            con.execute("SET VARIABLE autheval_lake = ?", [str(root)])  # views bind when created
            for name in sorted(manifest.tables):
                locations = "[" + ", ".join(quote_literal(rel) for rel in manifest.table_files(name)) + "]"
                # View DDL cannot take bound parameters: the name is a checked identifier and the
                # paths quoted literals (warehouse.sql.quote_*).
                con.execute(template.replace("{table}", quote_identifier(name)).replace("{locations}", locations))
            con.register("snapshot_rows", pa.Table.from_pylist([
                {"snapshot": m.snapshot, "run_id": m.run_id, "parent": m.parent, "committed_at": m.committed_at,
                 "software": m.software, "tables": sorted(m.tables), "served": m.snapshot == manifest.snapshot}
                for m in kept], schema=_SNAPSHOT_ROWS))
            con.execute(load_sql("catalog_snapshots"))
            con.unregister("snapshot_rows")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        for leftover in tmp.parent.glob(tmp.name + ".wal"):
            leftover.unlink()
    return target


_SNAPSHOT_ROWS = pa.schema([("snapshot", pa.int64()), ("run_id", pa.string()), ("parent", pa.int64()),
                            ("committed_at", pa.string()), ("software", pa.string()),
                            ("tables", pa.list_(pa.string())), ("served", pa.bool_())])


def link_served_catalog(root: Path, number: int) -> Path:
    """Serve snapshot `number`'s catalog as autheval.duckdb: a hard link renamed over the old one (a
    copy where links are not supported), so a reader opens the old catalog or the new one."""
    source = snapshot_catalog_path(root, number)
    target = Path(root) / CATALOG_NAME
    if target.exists() and source.exists() and os.path.samefile(source, target):
        return target
    with atomic_path(target) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
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
