"""The storage layer: the Parquet lake (the truth), the DuckDB catalog of views, read-only access.

Nothing here imports Dagster: the lake is usable from the CLI, notebooks and tests alike.
"""

from warehouse.atomic import atomic_path, atomic_write_bytes, atomic_write_text
from warehouse.sql import load_sql

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "load_sql"]
