"""What the command modules share: the default lake folder and the progress lines on stderr. Imports
nothing heavy, so that building the parser (and `--help`) imports neither numpy nor DuckDB."""

from __future__ import annotations

import sys
from pathlib import Path

# warehouse.lake.DEFAULT_LAKE, spelled out for the same reason (warehouse.lake imports pyarrow)
DEFAULT_LAKE = Path("warehouse") / "lake"


def _progress(line: str) -> None:
    """Progress is for the person watching: stderr, so stdout carries only results."""
    print(line, file=sys.stderr, flush=True)
