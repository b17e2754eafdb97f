"""The DuckDB catalog: a small database file of views over the lake's Parquet files.

DuckDB allows one writer per file and a reader cannot open a file a writer holds, so the catalog is
never written in place: it is rebuilt in a temporary file and renamed over the old one (publish).
Readers open it read-only and keep the snapshot they opened.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse.atomic import atomic_path
from warehouse.lake import Lake
from warehouse.sql import load_sql, quote_identifier, quote_literal

CATALOG_NAME = "autheval.duckdb"


def catalog_path(lake: Lake) -> Path:
    return lake.root / CATALOG_NAME


def publish_catalog(lake: Lake) -> Path:
    """Rebuild the catalog with one view per lake table; atomic (temp file, then rename)."""
    target = catalog_path(lake)
    template = load_sql("catalog_view")
    with atomic_path(target) as tmp:
        tmp.unlink()  # DuckDB creates the file itself
        con = duckdb.connect(str(tmp))
        try:
            for name, location in lake.tables().items():
                # View DDL cannot take bound parameters: the name is a checked identifier and the
                # path a quoted literal (warehouse.sql.quote_*).
                con.execute(
                    template.replace("{table}", quote_identifier(name)).replace(
                        "{location}", quote_literal(location)
                    )
                )
            con.execute("CHECKPOINT")
        finally:
            con.close()
        for leftover in tmp.parent.glob(tmp.name + ".wal"):
            leftover.unlink()
    return target


def connect_readonly(lake: Lake) -> duckdb.DuckDBPyConnection:
    path = catalog_path(lake)
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path}: run `autheval demo` (or publish the lake) first")
    return duckdb.connect(str(path), read_only=True)


def query(lake: Lake, sql: str, params=None) -> pa.Table:
    """Run read-only SQL over the catalog."""
    con = connect_readonly(lake)
    try:
        return con.execute(sql, params or []).arrow().read_all()
    finally:
        con.close()
