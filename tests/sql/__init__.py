"""SQL that only tests run: the oracles the estimators' own files are checked against.

Nothing in the project runs these (sql/README.md says which file runs where): the portable quantiles,
identity check and paired contrast (the in-process DuckDB takes those steps for every engine), the
DuckDB form of the `poisson` scheme's replicate sums and its weights as a table (the estimators hash
them in numpy or C in process, and `sql/estimates/portable_replicates_poisson.sql` on another engine),
and the monitor's period moments one row per cluster state and ratio (monitor_period_moments_long).
"""

from __future__ import annotations

from pathlib import Path

from warehouse.engine import bind_parameters
from warehouse.sql import load_sql

HERE = Path(__file__).parent


def sql_text(name: str) -> str:
    """tests/sql/<name>.sql where a test keeps it, else the project's sql/<name>.sql."""
    path = HERE / f"{name}.sql"
    return path.read_text(encoding="utf-8") if path.is_file() else load_sql(name)


def engine_read(engine, name: str, params: dict | None = None):
    """`engine.read` for a file of either folder (an oracle here is not among the engine's files)."""
    if not (HERE / f"{name}.sql").is_file():
        return engine.read(name, params)
    return engine.backend.sql(bind_parameters(sql_text(name), params), dialect="duckdb").to_pyarrow()
