"""Record sets cut out of one lake table by a SQL file: the grouping step the lake's estimates (one
record set per analysis of `records`) and trend (one per pool and period of `landed_records`) share."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from autheval.io import table_sha256
from autheval.records.read import records_from_table
from autheval.records.schema import RecordSet
from warehouse.sql import load_sql


def recordsets_by(
    con: duckdb.DuckDBPyConnection, table: str, sql_name: str, groups: Iterable[tuple[str, dict]]
) -> list[RecordSet]:
    """One RecordSet per (label, parameters) in `groups`: the rows `sql_name` selects from lake table
    `table` (registered on `con`) with those parameters, validated, named `label`, with source
    `lake:<table>/<label>` and the SHA-256 of exactly the rows selected."""
    out = []
    for label, params in groups:
        part = con.execute(load_sql(sql_name), params).arrow().read_all()
        out.append(records_from_table(part, f"lake:{table}/{label}", label, table_sha256(part)))
    return out
