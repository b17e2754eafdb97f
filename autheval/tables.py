"""Plain-text rendering of small result tables for the terminal (used by demo and query)."""

from __future__ import annotations

import csv
import io
import json
import math

import pyarrow as pa


def cell(value) -> str:
    """A CSV cell: floats as their shortest round-trip repr, booleans True/False, None empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"
    return str(value)


def render(table: pa.Table, fmt: str = "table", title: str | None = None) -> str:
    rows = table.to_pylist()
    columns = table.column_names
    if fmt == "json":
        return json.dumps(rows, default=str, indent=1)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([cell(row[c]) for c in columns])
        return buffer.getvalue().rstrip("\n")
    cells = [[_text(row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [title] if title else []
    lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
