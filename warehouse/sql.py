"""Load the project's SQL files by name: SQL lives in `sql/`, never in Python strings."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

SQL_PACKAGE = "sql"  # the top-level `sql/` folder, an importable package whose *.sql files are package data
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@lru_cache(maxsize=None)
def load_sql(name: str) -> str:
    """Return the text of `sql/<name>.sql` (from the checkout or the installed package alike)."""
    if not _NAME.match(name):
        raise ValueError(f"bad SQL file name {name!r}")
    resource = files(SQL_PACKAGE).joinpath(f"{name}.sql")
    if not resource.is_file():
        raise FileNotFoundError(f"no SQL file {name}.sql in the {SQL_PACKAGE!r} package ({resource})")
    return resource.read_text(encoding="utf-8")


def quote_identifier(name: str) -> str:
    """Quote a table name for DDL that cannot take bound parameters (view definitions).

    Only plain lower-case names are accepted, so the name is also a valid identifier on every engine.
    """
    if not re.match(r"^[a-z_][a-z0-9_]*$", name):
        raise ValueError(f"table name {name!r} is not a plain lower-case identifier")
    return f'"{name}"'


def quote_literal(text: str) -> str:
    """Quote a string literal (a file path in a view definition)."""
    return "'" + text.replace("'", "''") + "'"


def materialize(con, name: str, sql_name: str, params=None):
    """Run `sql/<sql_name>.sql` into a native table `name` on `con` (DuckDB's relation API creates it,
    so no SQL is composed in Python)."""
    con.sql(load_sql(sql_name), params=params or None).create(name)


def connect(memory_limit: str | None = None):
    """An in-memory DuckDB connection for compute, with bounded memory: past the limit DuckDB spills
    to a temporary folder instead of growing (AUTHEVAL_DUCKDB_MEMORY, default 512MB)."""
    import os
    import tempfile

    import duckdb

    spill = Path(tempfile.gettempdir()) / "autheval-duckdb-spill"
    return duckdb.connect(config={
        "memory_limit": memory_limit or os.environ.get("AUTHEVAL_DUCKDB_MEMORY", "512MB"),
        "temp_directory": str(spill),
    })
