"""The Parquet lake: tables as Parquet files, committed together as snapshots (warehouse/snapshots.py).

Parquet is the truth; the DuckDB catalog (catalog.py) only holds views over one snapshot's files, so
any number of readers can look while a run writes the next snapshot. A table is read from the served
snapshot, or, inside an open run, from what that run staged; a write inside a run is staged and
committed with the run's other tables; a write outside any run is a run of its own (committed at once).

The root is a local path or a URI (`file:///...`, `s3://bucket/lake`, ...): tables are read, written
and listed through its pyarrow filesystem (warehouse/filesystem.py), one code path for all of them.
The catalog, the writer lock, the reports and the landing folder use `root` as a local folder.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pyarrow as pa

from warehouse import filesystem, snapshots
from warehouse.snapshots import LakeRun, Manifest

DEFAULT_LAKE = Path("warehouse") / "lake"
PARTITIONED_MARKER = ".partitioned_table"  # a pre-snapshot lake's folder of partitions (read as snapshot 0)
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.\-]+$")


class Lake:
    """A lake of Parquet tables, read from its served snapshot (or the open run's staged tables).
    `root`: a local path or a URI (see warehouse/filesystem.py); `keep_snapshots`: how many committed
    snapshots stay queryable (default $AUTHEVAL_KEEP_SNAPSHOTS, else 10)."""

    def __init__(self, root: str | Path = DEFAULT_LAKE, keep_snapshots: int | None = None, snapshot: int | None = None):
        self.location = filesystem.lake_location(root)
        filesystem.check_lake_folder(self.location)
        self.root = self.location.local_root()
        self.keep_snapshots = keep_snapshots
        self.pinned = snapshot  # read this committed snapshot instead of the served one

    @staticmethod
    def _check(name: str) -> str:
        if not _TABLE.match(name):
            raise ValueError(f"table name {name!r} must be a lower-case identifier")
        return name

    @staticmethod
    def _check_partition(partition: str) -> str:
        if not _PARTITION.match(partition) or len(partition) > 200:
            raise ValueError(f"partition key {partition!r} must be 1-200 characters of [A-Za-z0-9_.-]")
        return partition

    # which snapshot

    def run(self) -> LakeRun | None:
        """The run open on this lake in this process (writes go to it), if any."""
        return None if self.pinned is not None else snapshots.active_run(self.location)

    def snapshot(self) -> Manifest:
        """The snapshot this handle reads: the pinned one, else the served one."""
        if self.pinned is not None:
            return snapshots.read_committed(self.location, self.pinned)
        return snapshots.current_manifest(self.location, self._legacy_tables)

    def _entries(self) -> dict[str, dict]:
        """Table -> entry of what a read sees now: the snapshot, with the open run's staged tables over it."""
        entries = dict(self.snapshot().tables)
        run = self.run()
        if run is not None:
            entries.update(run.staged())
        return entries

    def _abs(self, rel: str) -> str:
        """The store path of a manifest's path: inside the lake, never through a link leading out."""
        return snapshots.resolve(self.location, rel)

    def table_files(self, name: str) -> list[str]:
        """The files of table `name` (store paths), or [] when it is not in the lake."""
        entry = self._entries().get(self._check(name))
        return [] if entry is None else [self._abs(rel) for rel in snapshots.entry_files(entry)]

    def has_table(self, name: str) -> bool:
        return bool(self.table_files(name))

    def has_partition(self, name: str, partition: str) -> bool:
        entry = self._entries().get(self._check(name)) or {}
        return self._check_partition(partition) in entry.get("partitions", {})

    def partition_path(self, name: str, partition: str) -> Path | PurePosixPath:
        """The file of one partition as it is read now (a path that does not exist when it is not in
        the lake)."""
        entry = self._entries().get(self._check(name)) or {}
        rel = entry.get("partitions", {}).get(self._check_partition(partition))
        return Path(self._abs(rel)) if rel else self.root / name / f"{partition}.parquet"

    def table_path(self, name: str) -> Path | PurePosixPath:
        """The file of a one-file table as it is read now (a path that does not exist when the table is
        not in the lake)."""
        files = self.table_files(name)
        if len(files) == 1 and not self._entries()[name].get("partitions"):
            return Path(files[0])
        return self.root / f"{name}.parquet"

    # writing

    @contextlib.contextmanager
    def open_run(self, run_id: str | None = None, software: str = "") -> Iterator[LakeRun]:
        """A writing run: every table written in the block commits as one snapshot when the block ends
        without an error; on an error nothing is committed and the staged files are removed. Raises
        LakeBusy (one line) when another run holds the lake."""
        run = LakeRun(
            self.location, run_id or snapshots.new_run_id(), self._legacy_tables, self.keep_snapshots, software
        ).open()
        with run:
            yield run

    @contextlib.contextmanager
    def _writing(self) -> Iterator[LakeRun]:
        """The open run, or a run of one write committed at the end of the block."""
        if self.pinned is not None:
            raise ValueError(f"lake {self.root} is pinned to snapshot {self.pinned}: it is read-only")
        run = self.run()
        if run is not None:
            yield run
            return
        with self.open_run(snapshots.new_run_id("write")) as own:
            yield own

    def _write(self, path: str, table: pa.Table, metadata: dict | None) -> Path:
        if metadata:
            merged = dict(table.schema.metadata or {})
            merged.update({str(k).encode(): str(v).encode() for k, v in metadata.items()})
            table = table.replace_schema_metadata(merged)
        filesystem.write_parquet(self.location, path, table)
        if self.location.is_local:  # a run's file is never rewritten: read-only for everyone, notebooks too
            os.chmod(path, 0o444)
        return Path(path)

    def write(self, name: str, table: pa.Table, metadata: dict | None = None) -> Path:
        """Write table `name` into the open run (or as a run of its own): readers see it once the run
        commits, never half of it."""
        self._check(name)
        with self._writing() as run:
            return self._write(run.stage_table(name), table, metadata)

    def write_partition(self, name: str, partition: str, table: pa.Table, metadata: dict | None = None) -> Path:
        """Add (or replace) one partition of table `name`, keeping its other partitions."""
        self._check(name)
        self._check_partition(partition)
        with self._writing() as run:
            previous = (self.snapshot().tables.get(name) or {}).get("partitions", {})
            return self._write(run.stage_partition(name, partition, previous), table, metadata)

    def publish_path(self, relative: str) -> Path | PurePosixPath:
        """Where to write a file the run publishes at <root>/<relative> (a report): staged in the open
        run and put in place at its commit; without a run, the final path (write it atomically)."""
        run = self.run()
        return Path(run.stage_file(relative)) if run is not None else self.root / relative

    def after_commit(self, callback) -> None:
        """Call `callback` once the open run commits (at once when no run is open)."""
        run = self.run()
        if run is None:
            callback()
        else:
            run.after_commit(callback)

    # reading

    def read(self, name: str) -> pa.Table:
        files = self.present_files(name)
        if not files:
            raise FileNotFoundError(f"no table {name!r} in lake {self.root}")
        entry = self._entries()[name]
        return filesystem.read_parquet(self.location, files if entry.get("partitions") else files[0])

    def present_files(self, name: str) -> list[str]:
        """table_files, each checked to be there: a committed file gone is named
        (snapshots.check_whole), for a reader that scans the files where they lie as for `read`."""
        files = self.table_files(name)
        missing = [path for path in files if not filesystem.is_file(self.location, path)]
        if missing:
            run = self.run()
            if run is None or name not in run.staged():  # a committed file gone: name it and the way back
                snapshots.check_whole(self.location, self.snapshot())
            raise snapshots.SnapshotError(f"{missing[0]}: a file of table {name!r} is missing ({len(missing)} in all)")
        return files

    def tables(self) -> dict[str, str | list[str]]:
        """Table name -> what a view reads (a file, or the list of a partitioned table's files; local
        paths or URIs), for every table of the snapshot read now (its manifest read once)."""
        found = {}
        for name, entry in sorted(self._entries().items()):
            files = [self._view_path(self._abs(rel)) for rel in snapshots.entry_files(entry)]
            if files:
                found[name] = files if entry.get("partitions") else files[0]
        return found

    def _legacy_tables(self) -> dict[str, dict]:
        """A lake written before snapshots: <root>/<table>.parquet files and marked partition folders."""
        found: dict[str, dict] = {}
        for entry in filesystem.list_dir(self.location, str(self.root)):
            name = entry.base_name
            if name.startswith("."):
                continue
            stem = name[: -len(".parquet")] if name.endswith(".parquet") else ""
            if entry.type == filesystem.pafs.FileType.File and stem and _TABLE.match(stem):
                found[stem] = {"file": name}
            elif (
                entry.type == filesystem.pafs.FileType.Directory
                and _TABLE.match(name)
                and filesystem.is_file(self.location, f"{entry.path}/{PARTITIONED_MARKER}")
            ):
                parts = {
                    info.base_name[: -len(".parquet")]: f"{name}/{info.base_name}"
                    for info in filesystem.list_dir(self.location, entry.path)
                    if info.type == filesystem.pafs.FileType.File and info.base_name.endswith(".parquet")
                }
                if parts:
                    found[name] = {"partitions": parts}
        return found

    def _view_path(self, path: str) -> str:
        """What a view reads: the local path, or the object's URI."""
        return path if self.location.is_local else self.location.uri(path[len(self.location.root) :].lstrip("/"))
