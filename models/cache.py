"""The resumable Parquet cache of the model runs (the scorer's likelihoods, the probe's features).

One folder per key (`key_directory`: a short hash of the key's parts), holding part files, each
written atomically under a name no other part has: an interrupted run keeps every finished part, a
rerun computes only the rows not yet served, and a new part never replaces one (not even after a part
was deleted). A row is served by its key columns (the model and image, and the SHA-256 of the input
that reached the model); the first part by name wins a duplicate key. What a caller serves beyond
that (a row of another key, a row written before inputs were hashed) is its `servable` filter.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PART_GLOB = "part-*.parquet"


def key_tag(*parts: str) -> str:
    """The folder name of a key: 16 hex digits of the SHA-256 of its parts joined by \\x1f."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def key_directory(root: str | Path, *parts: str) -> Path:
    return Path(root) / key_tag(*parts)


def part_paths(directory: str | Path) -> list[Path]:
    """A key's part files in the order they were written."""
    return sorted(Path(directory).glob(PART_GLOB))


def new_part_path(directory: Path) -> Path:
    """A part file name no other part has (time, then random): a new part never replaces one, and names
    sort in the order they were written."""
    return Path(directory) / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"


def write_part(directory: Path, table: pa.Table) -> Path:
    """One chunk of finished rows as its own Parquet file, written to a temporary name and renamed."""
    from warehouse.atomic import atomic_path

    target = new_part_path(directory)
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp)
    return target


def first_per_key(
    table: pa.Table, key_columns: Sequence[str], accept: Callable[[tuple], bool] | None = None
) -> pa.Table:
    """The first row of each key (in part order), among the rows whose key `accept` takes."""
    keys = list(zip(*(table.column(c).to_pylist() for c in key_columns)))
    seen, keep = set(), []
    for i, key in enumerate(keys):
        if key not in seen and (accept is None or accept(key)):
            seen.add(key)
            keep.append(i)
    return table if len(keep) == len(keys) else table.take(pa.array(keep, pa.int64()))


def read_parts(
    parts: Sequence[Path], schema: pa.Schema, servable: Callable[[Path, pa.Table], np.ndarray] | None = None
) -> tuple[pa.Table, list[pa.Table]]:
    """(the servable rows of `parts` in part order, each part's rows as read). `servable(part, table)`
    gives a boolean mask of the rows to serve (default: all)."""
    read = [pq.read_table(part, schema=schema) for part in parts]
    if not read:
        return schema.empty_table(), []
    kept = []
    for part, table in zip(parts, read):
        keep = servable(part, table) if servable is not None else None
        kept.append(table if keep is None or keep.all() else table.filter(pa.array(keep)))
    return pa.concat_tables(kept), read
