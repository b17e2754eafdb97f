"""The Parquet lake: one file per table (or one per partition), written atomically.

Parquet is the truth; the DuckDB catalog (catalog.py) only holds views over these files, so any
number of readers can look while a writer replaces a table.

The root is a local path or a URI (`file:///...`, `s3://bucket/lake`, ...): tables are read, written
and listed through its pyarrow filesystem (warehouse/filesystem.py), one code path for all of them.
The catalog, the reports and the landing folder use `root` as a local folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from warehouse import filesystem

DEFAULT_LAKE = Path("warehouse") / "lake"
PARTITIONED_MARKER = ".partitioned_table"  # marks a folder of partitions as a table (not landing, reports...)
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.\-]+$")


class Lake:
    """A folder of Parquet tables: `<root>/<table>.parquet` or `<root>/<table>/<partition>.parquet`.
    `root`: a local path or a URI (see warehouse/filesystem.py)."""

    def __init__(self, root: str | Path = DEFAULT_LAKE):
        self.location = filesystem.lake_location(root)
        self.root = self.location.local_root()

    @staticmethod
    def _check(name: str) -> str:
        if not _TABLE.match(name):
            raise ValueError(f"table name {name!r} must be a lower-case identifier")
        return name

    def table_path(self, name: str) -> Path:
        return self.root / f"{self._check(name)}.parquet"

    def partition_path(self, name: str, partition: str) -> Path:
        if not _PARTITION.match(partition):
            raise ValueError(f"partition key {partition!r} has characters outside [A-Za-z0-9_.-]")
        return self.root / self._check(name) / f"{partition}.parquet"

    def _write(self, path: Path, table: pa.Table, metadata: dict | None) -> Path:
        if metadata:
            merged = dict(table.schema.metadata or {})
            merged.update({str(k).encode(): str(v).encode() for k, v in metadata.items()})
            table = table.replace_schema_metadata(merged)
        filesystem.write_parquet(self.location, str(path), table)
        return path

    def write(self, name: str, table: pa.Table, metadata: dict | None = None) -> Path:
        """Replace table `name` atomically: readers see the old file or the new one, never half."""
        return self._write(self.table_path(name), table, metadata)

    def write_partition(self, name: str, partition: str, table: pa.Table, metadata: dict | None = None) -> Path:
        path = self._write(self.partition_path(name, partition), table, metadata)
        filesystem.touch(self.location, str(path.parent / PARTITIONED_MARKER))
        return path

    def read(self, name: str) -> pa.Table:
        path = str(self.table_path(name))
        if filesystem.is_file(self.location, path):
            return filesystem.read_parquet(self.location, path)
        parts = self._partitions(str(self.root / self._check(name)))
        if parts:
            return filesystem.read_parquet(self.location, parts)
        raise FileNotFoundError(f"no table {name!r} in lake {self.root}")

    def _partitions(self, folder: str) -> list[str]:
        return [info.path for info in filesystem.list_dir(self.location, folder)
                if info.type == filesystem.pafs.FileType.File and info.base_name.endswith(".parquet")]

    def tables(self) -> dict[str, str]:
        """Table name -> the file (or glob) a view reads, for every complete table in the lake."""
        found = {}
        for entry in filesystem.list_dir(self.location, str(self.root)):
            name = entry.base_name
            if name.startswith("."):
                continue
            stem = name[: -len(".parquet")] if name.endswith(".parquet") else ""
            if entry.type == filesystem.pafs.FileType.File and stem and _TABLE.match(stem):
                found[stem] = self._view_path(entry.path)
            elif (entry.type == filesystem.pafs.FileType.Directory
                  and filesystem.is_file(self.location, f"{entry.path}/{PARTITIONED_MARKER}")
                  and self._partitions(entry.path)):
                found[name] = self._view_path(f"{entry.path}/*.parquet")
        return found

    def _view_path(self, path: str) -> str:
        """What a view reads: the local path, or the object's URI."""
        return path if self.location.is_local else self.location.uri(path[len(self.location.root):].lstrip("/"))
