"""The Parquet lake: one file per table (or one per partition), written atomically.

Parquet is the truth; the DuckDB catalog (catalog.py) only holds views over these files, so any
number of readers can look while a writer replaces a table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.atomic import atomic_path

DEFAULT_LAKE = Path("warehouse") / "lake"
PARTITIONED_MARKER = ".partitioned_table"  # marks a folder of partitions as a table (not landing, reports...)
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.\-]+$")


class Lake:
    """A folder of Parquet tables: `<root>/<table>.parquet` or `<root>/<table>/<partition>.parquet`."""

    def __init__(self, root: str | Path = DEFAULT_LAKE):
        self.root = Path(root).resolve()

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
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        return path

    def write(self, name: str, table: pa.Table, metadata: dict | None = None) -> Path:
        """Replace table `name` atomically: readers see the old file or the new one, never half."""
        return self._write(self.table_path(name), table, metadata)

    def write_partition(self, name: str, partition: str, table: pa.Table, metadata: dict | None = None) -> Path:
        path = self._write(self.partition_path(name, partition), table, metadata)
        (path.parent / PARTITIONED_MARKER).touch()
        return path

    def read(self, name: str) -> pa.Table:
        path = self.table_path(name)
        if path.exists():
            return pq.read_table(path)
        folder = self.root / self._check(name)
        if folder.is_dir():
            return pq.ParquetDataset(sorted(str(p) for p in folder.glob("*.parquet"))).read()
        raise FileNotFoundError(f"no table {name!r} in lake {self.root}")

    def tables(self) -> dict[str, str]:
        """Table name -> the file (or glob) a view reads, for every complete table in the lake."""
        found = {}
        if not self.root.is_dir():
            return found
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_file() and entry.suffix == ".parquet" and _TABLE.match(entry.stem):
                found[entry.stem] = str(entry)
            elif (entry / PARTITIONED_MARKER).exists() and any(entry.glob("*.parquet")):
                found[entry.name] = str(entry / "*.parquet")
        return found
