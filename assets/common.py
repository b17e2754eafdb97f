"""What every asset does the same way: read lake tables onto a connection (SQL files run through
warehouse.sql's run/rows/one) and write the result."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import pyarrow as pa
from dagster import MaterializeResult, MetadataValue, TableColumn, TableSchema

from warehouse.lake import Lake
from warehouse.sql import connect, one

# Groups (stages of the flow) and kinds, so the lineage reads left to right.
INGEST, DUPLICATES, CONTEXT, PROPOSALS, REVIEW, SCORING, ESTIMATES, REPORTS, RECURRING = (
    "ingest", "duplicates", "context", "proposals", "review", "scoring", "estimates", "reports",
    "recurring",
)  # fmt: skip


def connect_with(lake: Lake, tables: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the named lake tables registered as relations."""
    con = connect()
    for name in tables:
        con.register(name, lake.read(name))
    return con


def table_schema(table: pa.Table) -> TableSchema:
    """The Arrow schema as Dagster's TableSchema (column name and Arrow type)."""
    return TableSchema(columns=[TableColumn(f.name, str(f.type)) for f in table.schema])


def write_table(
    lake: Lake, name: str, table: pa.Table, metadata: dict | None = None, asset_key: str | None = None, **extra
) -> MaterializeResult:
    """Write `name` atomically and describe it: Dagster's standard `dagster/row_count` and
    `dagster/column_schema`, the file, plus any extra metadata (`asset_key` names the output of a
    multi-asset)."""
    path = lake.write(name, table, metadata=metadata)
    return MaterializeResult(
        asset_key=asset_key,
        metadata={
            "dagster/row_count": MetadataValue.int(table.num_rows),
            "dagster/column_schema": MetadataValue.table_schema(table_schema(table)),
            "path": MetadataValue.path(str(path)),
            **extra,
        },
    )


def check_row(
    lake: Lake,
    sql_name: str,
    tables: Iterable[str],
    aliases: dict[str, str] | None = None,
    extra: dict[str, pa.Table] | None = None,
) -> dict:
    """A check SQL file's one row (warehouse.sql.one) over lake tables, optionally registered under
    other names, plus `extra` tables from outside the lake: the asset checks' reader, patched by name in
    tests."""
    con = connect_with(lake, tables)
    for alias, name in (aliases or {}).items():
        con.register(alias, lake.read(name))
    for name, table in (extra or {}).items():
        con.register(name, table)
    return one(con, sql_name)
