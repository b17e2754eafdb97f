"""The resumable Parquet cache of the model runs (the scorer's likelihoods, the probe's features).

One folder per key (`key_directory`: a short hash of the key's parts), holding part files, each
written atomically under a name no other part has: an interrupted run keeps every finished part, a
rerun computes only the rows not yet served, and a new part never replaces one (not even after a part
was deleted). A row is served by its key columns (the model and image, and the SHA-256 of the input
that reached the model); the first part by name wins a duplicate key. What a caller serves beyond
that (a row of another key, a row written before inputs were hashed) is its `servable` filter.

Two processes may share a cache (two scorers on one lake). Merging a key's parts after a run
(`compaction_lock`) is done by one process at a time, the other skipping it; a reader whose part
vanished under it (merged by another process: the merged part lands before the old ones go) lists the
folder again and reads it again (`read_directory`), instead of failing with FileNotFoundError after a
finished run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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


def read_directory(
    directory: str | Path,
    schema: pa.Schema,
    servable: Callable[[Path, pa.Table], np.ndarray] | None = None,
    pattern: str = PART_GLOB,
    attempts: int = 8,
) -> tuple[list[Path], pa.Table, list[pa.Table]]:
    """(the parts matching `pattern` under `directory` now, their servable rows, each part's rows as
    read), as read_parts. A part removed while the folder is read was merged by another process, whose
    merged part was written first: the folder is listed and read again."""
    for attempt in range(attempts):
        parts = sorted(Path(directory).glob(pattern))
        try:
            table, read = read_parts(parts, schema, servable)
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
            continue
        return parts, table, read
    raise AssertionError("unreachable")  # the loop returns or raises


COMPACT_LOCK = ".compact.lock"


@contextmanager
def compaction_lock(directory: str | Path) -> Iterator[bool]:
    """Whether this process may merge the parts of `directory` now: an exclusive, non-blocking lock on
    `<directory>/.compact.lock`, opened without following a link (a link in its place, or a folder
    that cannot be written: no merge). False while another process merges: skip (its merge serves)."""
    try:
        fd = os.open(Path(directory) / COMPACT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            locked = False
        else:
            locked = True
        yield locked
    finally:
        os.close(fd)  # closing releases the lock


def remove_parts(parts: Sequence[Path]) -> None:
    """Remove merged parts; one already gone (an older process's merge) is not an error."""
    for part in parts:
        part.unlink(missing_ok=True)
