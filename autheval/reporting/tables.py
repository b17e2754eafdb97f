"""Plain-text rendering of result tables for the terminal: whole small tables (demo) or streamed
record batches (query).

Every value DuckDB can hand over is written without Python's datetime (whose years stop at 9999 and
whose clock stops before 24:00:00): one rendering per type, the same in every format (`python_values`):

* dates, times and timestamps: ISO text from the stored integers (`2024-01-31`, `24:00:00`,
  `2020-01-01 05:00:00+00:00` for a TIMESTAMPTZ, in UTC); years past 9999 or before 1 with a sign
  (`+10000-01-01`, `-0001-12-31`); DuckDB's infinite values as `infinity` and `-infinity`;
* intervals as ISO 8601 durations (`P1M2DT3.5S`, `-P1DT1H`... the parts as DuckDB keeps them: months,
  days, seconds); blobs as text with each byte outside printable ASCII (and the backslash) as `\\xNN`;
* lists, structs and maps (and arrays, unions) as JSON text in the table and CSV formats, as JSON values
  in the JSON format; decimals exact everywhere;
* NaN and infinities: the table writes `NaN`, `inf`, `-inf`; CSV writes `inf`, `-inf` and an empty cell
  for NaN (as for null); JSON, which has neither, writes null for all three.

CSV quotes a cell holding a newline, a carriage return, a quote or a comma; the table format writes a
cell's control characters as escapes (`\\n`, `\\r`, `\\t`, `\\xNN`), so one row is one line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
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


class Text(str):
    """A value already rendered as text (a date, an interval, a blob): JSON writes it as a string."""


_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_UNIT_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _civil(days: int) -> str:
    """Days since 1970-01-01 as a proleptic Gregorian date, for any year (H. Hinnant's algorithm)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    shown = f"{year:04d}" if 1 <= year <= 9999 else f"{year:+05d}"
    return f"{shown}-{month:02d}-{day:02d}"


def _clock(ticks: int, per_second: int) -> str:
    """A time of day (or a timestamp's) from ticks since midnight: HH:MM:SS[.fraction], 24:00:00 kept."""
    seconds, fraction = divmod(ticks, per_second)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if fraction:
        text += "." + f"{fraction:0{len(str(per_second)) - 1}d}"
    return text


def _temporal(value: int, kind: pa.DataType) -> Text:
    if pa.types.is_date32(kind) or pa.types.is_date64(kind):
        days = value if pa.types.is_date32(kind) else value // 86_400_000
        if pa.types.is_date32(kind) and abs(value) == _INT32_MAX:
            return Text("infinity" if value > 0 else "-infinity")
        return Text(_civil(days))
    if pa.types.is_timestamp(kind):
        if abs(value) == _INT64_MAX:
            return Text("infinity" if value > 0 else "-infinity")
        per_second = _UNIT_PER_SECOND[kind.unit]
        days, ticks = divmod(value, 86_400 * per_second)
        return Text(f"{_civil(days)} {_clock(ticks, per_second)}" + ("+00:00" if kind.tz else ""))
    if pa.types.is_time(kind):
        return Text(_clock(value, _UNIT_PER_SECOND[kind.unit]))
    return Text(_duration(0, 0, value * (1_000_000_000 // _UNIT_PER_SECOND[kind.unit])))  # a duration


def _duration(months: int, days: int, nanoseconds: int) -> str:
    """An interval as an ISO 8601 duration (each part with its own sign, as DuckDB keeps them)."""
    parts = "P"
    if months:
        parts += f"{months}M"
    if days:
        parts += f"{days}D"
    if nanoseconds:
        seconds = Decimal(nanoseconds).scaleb(-9).normalize()
        parts += f"T{seconds:f}S"
    return parts if parts != "P" else "PT0S"


def _blob(data: bytes) -> Text:
    return Text("".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}" for b in data))


def python_values(array: pa.Array | pa.ChunkedArray) -> list:
    """An Arrow column as Python values, with the renderings above (never a datetime: years past 9999,
    DuckDB's infinities and 24:00:00 are text as they are)."""
    if isinstance(array, pa.ChunkedArray):
        return [v for chunk in array.chunks for v in python_values(chunk)]
    kind = array.type
    valid = array.is_valid().to_pylist()
    if pa.types.is_dictionary(kind):
        return python_values(array.dictionary_decode())
    if pa.types.is_temporal(kind) and not pa.types.is_interval(kind):
        width = pa.int32() if pa.types.is_date32(kind) or pa.types.is_time32(kind) else pa.int64()
        raw = array.view(width).to_pylist()
        return [_temporal(v, kind) if ok else None for v, ok in zip(raw, valid)]
    if pa.types.is_interval(kind):
        return [Text(_duration(*v)) if v is not None else None for v in array.to_pylist()]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return [_blob(v) if v is not None else None for v in array.to_pylist()]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        offsets = array.offsets.to_pylist()  # into the whole child array (a slice's too)
        values = python_values(array.values)
        lists = [values[offsets[i] : offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]
        if not pa.types.is_map(kind):
            return lists
        return [{_key(e["key"]): e["value"] for e in entries} if entries is not None else None for entries in lists]
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        values = python_values(array.values)
        start = array.offset * size
        return [values[start + i * size : start + (i + 1) * size] if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_struct(kind):
        fields = [python_values(child) for child in array.flatten()]
        names = [kind.field(i).name for i in range(kind.num_fields)]
        return [dict(zip(names, row)) if ok else None for ok, row in zip(valid, zip(*fields) if fields else [])] or [
            {} if ok else None for ok in valid
        ]
    if pa.types.is_union(kind):
        return _union_values(array)
    try:
        return array.to_pylist()
    except (OverflowError, ValueError, pa.ArrowException):  # a type not listed above: its Arrow text
        return [Text(str(v)) if ok else None for v, ok in zip(array.cast(pa.string()).to_pylist(), valid)]


def _union_values(array) -> list:
    """A union column: each row's value from the child its type code names (sparse or dense)."""
    kind = array.type
    children = [python_values(array.field(i)) for i in range(kind.num_fields)]
    child_of = {code: i for i, code in enumerate(kind.type_codes)}
    codes = array.type_codes.to_pylist()
    dense = kind.mode == "dense"
    offsets = array.offsets.to_pylist() if dense else None
    out = []
    for row, code in enumerate(codes):
        at = offsets[row] if offsets is not None else array.offset + row
        out.append(children[child_of[code]][at])
    return out


def _key(value):
    return value if isinstance(value, (str, int, float, bool, Decimal)) or value is None else json_text(value)


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def _text(value) -> str:
    """A table-format cell: one line (control characters escaped); lists, structs and maps as JSON."""
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else "inf" if value > 0 else "-inf"
        return f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"
    if isinstance(value, (list, dict)):
        return _escape(json_text(value))
    return _escape(str(value))


def _csv_cell(value) -> str:
    if isinstance(value, (list, dict)):
        return json_text(value)
    return cell(value)


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
    if isinstance(value, Text):
        return json.dumps(str(value))
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

    `table`: aligned columns, widths taken from the header and the first batch, one line per row;
    `csv`: shortest round-trip floats, empty for null and NaN, a cell with a newline or carriage return
    quoted; `json`: one array of row objects, non-finite numbers null, decimals exact. Each type is
    rendered as the module's docstring says. A result naming a column twice is refused before anything
    is written."""
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
                quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)  # rows with a CR
                writer.writerow(columns)
            elif fmt == "json":
                out.write("[")
        values = [python_values(column) for column in batch.columns]
        rows = [dict(zip(columns, row)) for row in zip(*values)] if values else [{} for _ in range(batch.num_rows)]
        if fmt == "csv":
            for row in rows:
                texts = [_csv_cell(row[c]) for c in columns]
                (quoted if any("\r" in t for t in texts) else writer).writerow(texts)
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
