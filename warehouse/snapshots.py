"""Lake snapshots: the tables a run writes commit together, or not at all.

A reader (the catalog, `Lake.read`, Spark through `Lake.tables`) always sees one committed snapshot:
the previous run's tables or the new run's, never a mix. Layout under the lake root:

    runs/<run>/<table>.<token>.parquet        a table written by a run (never rewritten)
    runs/<run>/<table>/<key>.<token>.parquet  one partition of a partitioned table
    runs/<run>/_files/<path>                  a file the run publishes at <root>/<path> (the report)
    snapshots/<N>.json                        snapshot N: every table's files, its run, parent, time
    snapshots/<N>.duckdb                      snapshot N's catalog (views over exactly its files)
    CURRENT                                   N of the served snapshot: replacing it is the commit
    autheval.duckdb                           the served catalog (a hard link to snapshots/<N>.duckdb)
    .writer.lock                              flock'ed by the one writing run, and names it

A run writes only new files under runs/<run>/, so nothing a reader holds is ever replaced. Commit
writes the manifest and its catalog beside the served ones, then renames CURRENT into place (one
atomic rename), then links the catalog and publishes the run's files. A run that fails, is killed or
is refused leaves CURRENT as it was; the next writer removes what it left (files no retained snapshot
names, manifests past CURRENT). The last `keep` snapshots stay queryable (`autheval query --snapshot N`).

One writer at a time: the lock is an flock on .writer.lock (released by the kernel when the holder
dies, so kill -9 never leaves the lake locked); a second writer gets LakeBusy naming the holder. Within
one process, a Dagster run started inside an open run (the demo's stages) joins it instead.

A lake written before snapshots (tables at <root>/<table>.parquet, no CURRENT) is read as snapshot 0;
its files stay where they are and the first commit carries them over. No Dagster here.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs

from warehouse import filesystem
from warehouse.catalog_build import SNAPSHOTS, build_catalog, link_served_catalog
from warehouse.filesystem import LakeLocation

RUNS = "runs"
CURRENT = "CURRENT"
LOCK = ".writer.lock"
FILES = "_files"
KEEP_ENV = "AUTHEVAL_KEEP_SNAPSHOTS"
DEFAULT_KEEP = 10
WAIT_ENV = "AUTHEVAL_LAKE_WAIT"  # seconds a second writer waits for the lock before it is refused (default 0)
_RUN_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_MANIFEST = re.compile(r"^(\d{8})\.json$")


class LakeBusy(RuntimeError):
    """Another run holds the lake's writer lock; `str(err)` is one line naming it."""


class SnapshotError(ValueError):
    """A snapshot that does not exist or cannot be read, or a bad retention setting; one line (bad input)."""


def keep_snapshots(value: int | None = None) -> int:
    """How many snapshots stay queryable: `value`, else $AUTHEVAL_KEEP_SNAPSHOTS, else 10 (at least 1)."""
    if value is None:
        text = os.environ.get(KEEP_ENV, "").strip()
        try:
            value = int(text) if text else DEFAULT_KEEP
        except ValueError:
            raise SnapshotError(f"${KEEP_ENV}={text!r}: must be a whole number of snapshots (at least 1)") from None
    if value < 1:
        raise SnapshotError(f"keep_snapshots={value}: at least 1 snapshot must stay queryable")
    return value


def lock_wait() -> float:
    """Seconds a writer waits for the lock: $AUTHEVAL_LAKE_WAIT, default 0 (refused at once)."""
    text = os.environ.get(WAIT_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise SnapshotError(f"${WAIT_ENV}={text!r}: must be a number of seconds") from None


@dataclass
class Manifest:
    """One committed snapshot: table -> {"file": rel} or {"partitions": {key: rel}} (paths relative to
    the lake root, posix), plus the files published at the root and who committed it."""

    snapshot: int
    run_id: str
    parent: int | None
    committed_at: str
    tables: dict[str, dict] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # published path -> staged copy (rel)
    software: str = ""

    def table_files(self, name: str) -> list[str]:
        return entry_files(self.tables[name])

    def referenced(self) -> set[str]:
        refs = {rel for name in self.tables for rel in self.table_files(name)}
        return refs | set(self.files.values())

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError) as err:
            raise SnapshotError(f"{where}: not a snapshot manifest ({err})") from None


def entry_files(entry: dict) -> list[str]:
    """A manifest entry's files (relative to the root): the one file, or the partitions in key order."""
    return [entry["file"]] if "file" in entry else [entry["partitions"][k] for k in sorted(entry["partitions"])]


# --- reading ---------------------------------------------------------------------------------------


def _read_bytes(location: LakeLocation, path: str) -> bytes:
    with location.filesystem.open_input_stream(path) as stream:
        return stream.read()


def _write_bytes(location: LakeLocation, path: str, data: bytes) -> None:
    """Write atomically: a hidden temporary name beside `path`, then a move (a rename on a local disk)."""
    fs = location.filesystem
    parent, name = posixpath.split(path)
    fs.create_dir(parent, recursive=True)
    tmp = posixpath.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        if location.is_local:  # durable before it becomes visible: a crash never serves an empty manifest
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fs.move(tmp, path)
    finally:
        if filesystem.exists(location, tmp):
            fs.delete_file(tmp)


def current_number(location: LakeLocation) -> int | None:
    """The served snapshot's number, or None for a lake with no committed snapshot."""
    path = location.path(CURRENT)
    if not filesystem.is_file(location, path):
        return None
    text = _read_bytes(location, path).decode("ascii", "replace").strip()
    if not text.isdigit():
        raise SnapshotError(f"{path}: names no snapshot ({text[:40]!r}); the lake's pointer is corrupt")
    return int(text)


def manifest_path(location: LakeLocation, number: int) -> str:
    return location.path(SNAPSHOTS, f"{number:08d}.json")


def read_manifest(location: LakeLocation, number: int) -> Manifest:
    path = manifest_path(location, number)
    if not filesystem.is_file(location, path):
        kept = ", ".join(str(n) for n in snapshot_numbers(location)) or "none"
        raise SnapshotError(f"snapshot {number} is not kept in lake {location.root} (kept: {kept})")
    return Manifest.from_json(_read_bytes(location, path), path)


def snapshot_numbers(location: LakeLocation) -> list[int]:
    """The numbers of the manifests on disk (committed or left by a failed commit), ascending."""
    found = []
    for info in filesystem.list_dir(location, location.path(SNAPSHOTS)):
        match = _MANIFEST.match(info.base_name)
        if match and info.type == pafs.FileType.File:
            found.append(int(match.group(1)))
    return sorted(found)


def committed_snapshots(location: LakeLocation) -> list[Manifest]:
    """Every kept, committed snapshot, oldest first."""
    current = current_number(location)
    if current is None:
        return []
    return [read_manifest(location, n) for n in snapshot_numbers(location) if n <= current]


def current_manifest(location: LakeLocation, legacy: Callable[[], dict[str, dict]]) -> Manifest:
    """The served snapshot; a lake without CURRENT is snapshot 0 of what `legacy()` finds."""
    number = current_number(location)
    if number is None:
        return Manifest(0, "", None, "", legacy())
    return read_manifest(location, number)


# --- writing: one run ------------------------------------------------------------------------------

_ACTIVE: dict[str, LakeRun] = {}
_ACTIVE_LOCK = threading.Lock()


def active_run(location: LakeLocation) -> LakeRun | None:
    """The run open on this lake in this process, if any (a Lake binds its writes to it)."""
    return _ACTIVE.get(location.uri())


def new_run_id(prefix: str = "run") -> str:
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


class LakeRun:
    """The one writing run of a lake: stages tables under runs/<run>/, commits them as one snapshot."""

    def __init__(
        self,
        location: LakeLocation,
        run_id: str,
        legacy: Callable[[], dict[str, dict]],
        keep: int | None = None,
        software: str = "",
    ):
        if not _RUN_ID.match(run_id):
            raise ValueError(f"run id {run_id!r}: 1-100 characters of [A-Za-z0-9_.-]")
        self.location, self.run_id, self.software = location, run_id, software
        self.keep = keep_snapshots(keep)
        self._legacy = legacy
        self._lock_fd: int | None = None
        self._staged: dict[str, dict] = {}
        self._files: dict[str, str] = {}
        self._written: list[str] = []  # every file staged since the last commit (removed on abort)
        self._after_commit: list[Callable[[], None]] = []
        self.committed: list[int] = []
        self.closed = False

    # lifecycle

    def open(self) -> LakeRun:
        key = self.location.uri()
        with _ACTIVE_LOCK:
            other = _ACTIVE.get(key)
            if other is not None:
                raise LakeBusy(f"lake {self.location.root} in use by run {other.run_id} (this process)")
            self._acquire()
            _ACTIVE[key] = self
        try:
            self.recover()
        except BaseException:
            self.close()
            raise
        return self

    def _acquire(self) -> None:
        if not self.location.is_local:
            return  # object stores: one writer is the deployment's to ensure (documented)
        import fcntl

        root = Path(self.location.root)
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + lock_wait()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                holder = os.pread(fd, 400, 0).decode("utf-8", "replace").strip().splitlines()
                os.close(fd)
                who = holder[0] if holder else "another run"
                raise LakeBusy(
                    f"lake {root} in use by run {who}; try again when it ends (or set ${WAIT_ENV} to wait)"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.run_id} (pid {os.getpid()}, since {_now()})\n".encode(), 0)
        self._lock_fd = fd

    def close(self) -> None:
        """Release the lock (uncommitted files are removed first)."""
        if self.closed:
            return
        try:
            if self._written:
                self.abort()
        finally:
            self.closed = True
            with _ACTIVE_LOCK:
                if _ACTIVE.get(self.location.uri()) is self:
                    del _ACTIVE[self.location.uri()]
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # the flock goes with the descriptor
                self._lock_fd = None

    def __enter__(self) -> LakeRun:
        return self

    def __exit__(self, kind, error, tb) -> None:
        try:
            if kind is None:
                self.commit()
        finally:
            self.close()

    # staging

    def _stage(self, rel: str) -> str:
        self._check_open()
        self._written.append(rel)
        return self.location.path(rel)

    def stage_table(self, name: str) -> str:
        rel = posixpath.join(RUNS, self.run_id, f"{name}.{_token()}.parquet")
        path = self._stage(rel)
        self._staged[name] = {"file": rel}
        return path

    def stage_partition(self, name: str, key: str, previous: dict[str, str]) -> str:
        rel = posixpath.join(RUNS, self.run_id, name, f"{key}.{_token()}.parquet")
        path = self._stage(rel)
        parts = dict(self._staged.get(name, {}).get("partitions", previous))
        parts[key] = rel
        self._staged[name] = {"partitions": parts}
        return path

    def stage_file(self, published: str) -> str:
        """A path to write a file that commit publishes at <root>/<published> (a report, a plot)."""
        rel = posixpath.join(RUNS, self.run_id, FILES, _token(), published)
        path = self._stage(rel)
        self._files[published] = rel
        return path

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the run's tables are committed (e.g. move a landed file to processed/)."""
        self._check_open()
        self._after_commit.append(callback)

    def staged(self) -> dict[str, dict]:
        return self._staged

    def staged_files(self) -> dict[str, str]:
        return self._files

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"run {self.run_id} is closed")

    # commit, abort, clean-up

    def commit(self) -> int | None:
        """Commit what was staged since the last commit as one new snapshot; its number (None if
        nothing was staged). Raises before CURRENT moves if anything fails: the lake keeps serving
        the previous snapshot."""
        self._check_open()
        if not self._staged and not self._files:
            for callback in self._after_commit:
                callback()
            self._after_commit = []
            return None

        base = current_manifest(self.location, self._legacy)
        number = max([base.snapshot, *snapshot_numbers(self.location)]) + 1
        tables = {**base.tables, **self._staged}
        manifest = Manifest(
            number,
            self.run_id,
            base.snapshot if base.run_id or base.tables else None,
            _now(),
            tables,
            {**base.files, **self._files},
            self.software,
        )
        _write_bytes(self.location, manifest_path(self.location, number), manifest.to_json())
        if self.location.is_local:
            build_catalog(Path(self.location.root), manifest, number, self.keep, committed_snapshots(self.location))
        _write_bytes(self.location, self.location.path(CURRENT), f"{number}\n".encode())  # the commit
        self._staged, self._written = {}, []
        files, self._files = self._files, {}
        callbacks, self._after_commit = self._after_commit, []
        self.committed.append(number)
        if self.location.is_local:
            link_served_catalog(Path(self.location.root), number)
            _publish_files(Path(self.location.root), files)
        for callback in callbacks:
            callback()
        self.collect_garbage()
        return number

    def abort(self) -> None:
        """Forget what was staged since the last commit and remove its files."""
        for rel in self._written:
            with contextlib.suppress(OSError):
                self.location.filesystem.delete_file(self.location.path(rel))
        self._staged, self._files, self._written, self._after_commit = {}, {}, [], []
        _remove_empty_dirs(self.location, self.location.path(RUNS, self.run_id))

    def recover(self) -> None:
        """Undo what a failed or killed writer left: manifests (and catalogs) past CURRENT, stray
        temporary files, and every run file no kept snapshot names; then re-link the served catalog."""
        current = current_number(self.location)
        for number in snapshot_numbers(self.location):
            if current is None or number > current:
                self.location.filesystem.delete_file(manifest_path(self.location, number))
        if self.location.is_local:
            root = Path(self.location.root)
            for stray in [
                *root.glob(".CURRENT.*.tmp"),
                *root.glob(".autheval.duckdb.*"),
                *(root / SNAPSHOTS).glob(".*.tmp"),
                *(root / SNAPSHOTS).glob(".*.duckdb*"),
            ]:
                with contextlib.suppress(OSError):
                    stray.unlink()
            for number in _catalog_numbers(root):
                if current is None or number > current:
                    with contextlib.suppress(OSError):
                        (root / SNAPSHOTS / f"{number:08d}.duckdb").unlink()
            if current is not None:
                link_served_catalog(root, current)
        self.collect_garbage()

    def collect_garbage(self) -> None:
        """Keep the last `keep` snapshots: older manifests and catalogs go, and so does every file
        under runs/ that no kept snapshot names (this run's staged files excepted)."""
        current = current_number(self.location)
        numbers = [n for n in snapshot_numbers(self.location) if current is not None and n <= current]
        kept, dropped = numbers[-self.keep :], numbers[: -self.keep]
        referenced: set[str] = set(self._written)
        for number in kept:
            referenced |= read_manifest(self.location, number).referenced()
        for number in dropped:
            self.location.filesystem.delete_file(manifest_path(self.location, number))
        if self.location.is_local:
            root = Path(self.location.root)
            for number in _catalog_numbers(root):
                if number not in kept:
                    with contextlib.suppress(OSError):
                        (root / SNAPSHOTS / f"{number:08d}.duckdb").unlink()
        runs = self.location.path(RUNS)
        if not filesystem.is_dir(self.location, runs):
            return
        selector = pafs.FileSelector(runs, recursive=True, allow_not_found=True)
        for info in self.location.filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            rel = posixpath.relpath(info.path, self.location.root)
            if rel not in referenced:
                with contextlib.suppress(OSError):
                    self.location.filesystem.delete_file(info.path)
        for info in filesystem.list_dir(self.location, runs):
            if info.type == pafs.FileType.Directory:
                _remove_empty_dirs(self.location, info.path)


def _catalog_numbers(root: Path) -> list[int]:
    folder = root / SNAPSHOTS
    return sorted(int(p.stem) for p in folder.glob("*.duckdb") if p.stem.isdigit()) if folder.is_dir() else []


def _publish_files(root: Path, files: dict[str, str]) -> None:
    """Put each published file in place (a hard link to the run's copy, renamed over the old one)."""
    for published, rel in files.items():
        target = root / published
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            os.link(root / rel, tmp)
        except OSError:
            import shutil

            shutil.copyfile(root / rel, tmp)
        os.replace(tmp, target)


def _remove_empty_dirs(location: LakeLocation, path: str) -> None:
    if not location.is_local:
        return
    folder = Path(path)
    if not folder.is_dir():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        folder.rmdir()


def _token() -> str:
    return uuid.uuid4().hex[:12]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
