"""The reference study's published traces as a relation for the SQL of the assets built from them."""

from __future__ import annotations

import duckdb

from autheval.reference_data import reference_path, trace_catalog
from warehouse.sql import load_sql


def register_reference(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Register `reference_traces` (the six case traces) and `split_freeze` on `con`."""
    catalog = trace_catalog()
    con.register("trace_catalog", catalog)
    traces = con.execute(load_sql("reference_traces"), {"files": catalog.column("file").to_pylist()})
    con.register("reference_traces", traces.arrow().read_all())
    con.register("split_freeze", con.read_parquet(str(reference_path("split_freeze"))).arrow().read_all())
    return con
