"""What the command modules share: the default lake folder and the progress lines on stderr. Imports
nothing heavy, so that building the parser (and `--help`) imports neither numpy nor DuckDB."""

from __future__ import annotations

import sys
from pathlib import Path

# warehouse.lake.DEFAULT_LAKE, spelled out for the same reason (warehouse.lake imports pyarrow)
DEFAULT_LAKE = Path("warehouse") / "lake"


def write_output(table, path: Path, fmt: str) -> None:
    """Write a command's result table to `path` as `fmt` (flags.output_format) atomically, so a failed
    run leaves no file: the one writer of every table command (pyarrow imported only here)."""
    from warehouse.atomic import atomic_path

    with atomic_path(path) as tmp:
        if fmt == "csv":
            from pyarrow import csv

            csv.write_csv(table, tmp)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)


def _progress(line: str) -> None:
    """Progress is for the person watching: stderr, so stdout carries only results."""
    print(line, file=sys.stderr, flush=True)
