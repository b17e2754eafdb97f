"""Plain-text rendering of result tables for the terminal: whole small tables (demo) or streamed
record batches (query)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


def cell(value, missing: str = "", booleans: tuple[str, str] = ("False", "True"), digits: int | None = None) -> str:
    """A value as text. The defaults make a CSV cell (floats as their shortest round-trip repr, booleans
    True/False, None and NaN empty); the report passes its own words and a fixed number of digits."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return booleans[value]
    if isinstance(value, float):
        if math.isnan(value):
            return missing
        return repr(value) if digits is None else f"{value:.{digits}f}"
    return str(value)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"
    return str(value)


def render(table: pa.Table, fmt: str = "table", title: str | None = None) -> str:
    """A whole (small) table as text; `write_batches` is the streaming form for large results."""
    buffer = io.StringIO()
    if title:
        buffer.write(title + "\n")
    write_batches(table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)], fmt, buffer)
    return buffer.getvalue().rstrip("\n")


def json_text(value) -> str:
    """A value as JSON text. JSON has no NaN or Infinity tokens: non-finite floats are null (also
    inside lists and structs); DuckDB's exact decimals (e.g. `x * 0.5`, a DECIMAL(38, 10)) are JSON
    numbers with every digit (as floats they lost those past the 17th); dates and times are their text."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else "null"
    if isinstance(value, float):
        return json.dumps(value) if math.isfinite(value) else "null"
    if isinstance(value, dict):
        return "{" + ", ".join(json.dumps(str(k)) + ": " + json_text(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    return json.dumps(value, default=str)


def check_unique_columns(names: list[str]) -> None:
    """A result's columns are written by name (a CSV header, JSON object keys): two of one name would
    be one key holding the other's values, so a result naming a column twice is refused (ValueError)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"the result names the column {name!r} twice: give each column its own name (AS ...)")
        seen.add(name)


def write_batches(batches: Iterable[pa.RecordBatch], fmt: str, out: SupportsWrite[str]) -> int:
    """Write record batches to `out` as they come (memory bounded by one batch); returns the row count.

    `table`: aligned columns, widths taken from the header and the first batch; `csv`: shortest
    round-trip floats, empty for null and NaN; `json`: one array of row objects, non-finite numbers null,
    decimals exact. A result naming a column twice is refused before anything is written."""
    rows_written = 0
    widths: list[int] | None = None
    columns: list[str] = []
    first = True
    for batch in batches:
        if first:
            columns = batch.schema.names
            check_unique_columns(columns)
            if fmt == "csv":
                writer = csv.writer(out, lineterminator="\n")
                writer.writerow(columns)
            elif fmt == "json":
                out.write("[")
        rows = batch.to_pylist()
        if fmt == "csv":
            writer.writerows([cell(row[c]) for c in columns] for row in rows)
        elif fmt == "json":
            for i, row in enumerate(rows):
                sep = "\n" if first and i == 0 else ",\n"
                out.write(sep + json_text(row))
        else:
            cells = [[_text(row[c]) for c in columns] for row in rows]
            if widths is None:  # the header, once
                widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
                out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
                out.write("  ".join("-" * w for w in widths) + "\n")
            for r in cells:
                line = "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths))
                out.write(line.rstrip() + "\n")
        rows_written += len(rows)
        first = False
    if fmt == "json":
        out.write("[]\n" if first else "\n]\n" if rows_written else "]\n")
    return rows_written


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
