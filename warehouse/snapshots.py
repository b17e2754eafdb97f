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
names, manifests past CURRENT). The snapshots of the last `keep` runs stay queryable (`autheval query
--snapshot N`): a run is the unit kept, however many snapshots it commits.

One writer at a time: the lock is an flock on .writer.lock (released by the kernel when the holder
dies, so kill -9 never leaves the lake locked); a second writer gets LakeBusy naming the holder. Within
one process, a Dagster run started inside an open run (the demo's stages) joins it instead.

A lake written before snapshots (tables at <root>/<table>.parquet, no CURRENT) is read as snapshot 0;
its files stay where they are and the first commit carries them over. No Dagster here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import posixpath
import re
import stat
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
MAX_KEEP = 1_000_000
MAX_WAIT = 86_400.0  # a day: longer is no wait but a hang
WAIT_ENV = "AUTHEVAL_LAKE_WAIT"  # seconds a second writer waits for the lock before it is refused (default 0)
_RUN_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_MANIFEST = re.compile(r"^(\d{8})\.json$")


class LakeBusy(RuntimeError):
    """Another run holds the lake's writer lock; `str(err)` is one line naming it."""


class SnapshotError(ValueError):
    """A snapshot that does not exist or cannot be read, or a bad retention setting; one line (bad input)."""


def keep_snapshots(value: int | None = None) -> int:
    """How many snapshots stay queryable: `value`, else $AUTHEVAL_KEEP_SNAPSHOTS, else 10 (at least 1).
    A value that is not a whole number from 1 to MAX_KEEP is one line naming where it came from."""
    if value is None:
        text = os.environ.get(KEEP_ENV, "").strip()
        if not text:
            return DEFAULT_KEEP
        if not re.fullmatch(r"[0-9]{1,7}", text, re.ASCII) or not 1 <= int(text) <= MAX_KEEP:
            raise SnapshotError(
                f"${KEEP_ENV}={text!r}: must be a whole number, at least 1 snapshot and at most {MAX_KEEP:,} "
                f"(default {DEFAULT_KEEP})"
            )
        return int(text)
    if not _whole(value) or not 1 <= value <= MAX_KEEP:
        raise SnapshotError(
            f"keep_snapshots={value!r}: must be a whole number, at least 1 snapshot and at most {MAX_KEEP:,}"
        )
    return value


def lock_wait() -> float:
    """Seconds a writer waits for the lock: $AUTHEVAL_LAKE_WAIT, default 0 (refused at once); a value
    that is not a number of seconds from 0 to MAX_WAIT is one line naming the variable."""
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return 0.0
    # ASCII digits only: float() also takes other scripts' digits ('٥') and 'inf', '1e3', '1_0'
    value = float(text) if re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,6})?", text, re.ASCII) else math.nan
    if not 0 <= value <= MAX_WAIT:  # NaN fails too
        raise SnapshotError(f"${WAIT_ENV}={text!r}: must be a number of seconds from 0 to {MAX_WAIT:g}") from None
    return value


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
        """A manifest as written by commit; anything else (not JSON, nested past reason, other keys or
        types, a path that leaves the lake or names its own state files) is one line naming `where`."""
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict):
                raise TypeError(f"a JSON object is expected, not {type(raw).__name__}")
            manifest = cls(**raw)
            manifest.check()
        except RecursionError:
            raise SnapshotError(f"{where}: not a snapshot manifest (nested too deeply)") from None
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise SnapshotError(f"{where}: not a snapshot manifest ({str(err).splitlines()[0][:200]})") from None
        return manifest

    def check(self) -> None:
        """Every field of the type commit writes, and every path a relative path inside the lake that
        is none of its state files (ValueError naming the first that is not)."""
        for name, value, kind in (
            ("snapshot", self.snapshot, int),
            ("run_id", self.run_id, str),
            ("committed_at", self.committed_at, str),
            ("software", self.software, str),
            ("tables", self.tables, dict),
            ("files", self.files, dict),
        ):
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{name} must be a {kind.__name__}")
        if self.snapshot < 0 or not (self.parent is None or (type(self.parent) is int and 0 <= self.parent)):
            raise ValueError("snapshot and parent must be whole numbers")
        for table, entry in self.tables.items():
            if not _is_entry(entry):
                raise ValueError(f"table {table!r}: an entry is {{'file': path}} or {{'partitions': {{key: path}}}}")
            if "partitions" in entry and not isinstance(entry["partitions"], dict):
                raise ValueError(f"table {table!r}: partitions must map keys to paths")
            for rel in entry_files(entry):
                check_relative(rel, f"table {table!r}")
        for published, rel in self.files.items():
            check_relative(published, "published file", publish=True)
            check_relative(rel, f"published file {published!r}")


def _is_entry(entry: object) -> bool:
    """A manifest's table entry: {"file": ...} or {"partitions": ...}, nothing else."""
    return isinstance(entry, dict) and len(entry) == 1 and bool({"file", "partitions"} & set(entry))


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# the lake's own state at its root: no table file and no published file may be one of these
STATE_NAMES = frozenset({CURRENT, LOCK, SNAPSHOTS, "autheval.duckdb"})


def check_relative(rel: object, what: str, publish: bool = False) -> str:
    """`rel` as a manifest holds a path: relative to the lake root, posix, normalized (no `..`, no
    empty or `.` part), none of the lake's state files; a published file also not under runs/ and not
    hidden. ValueError naming `what` otherwise."""
    if not isinstance(rel, str) or not rel:
        raise ValueError(f"{what}: a path must be a non-empty string, got {rel!r}")
    parts = rel.split("/")
    if (
        rel.startswith("/")
        or "\\" in rel
        or "\0" in rel
        or any(part in ("", ".", "..") for part in parts)
        or parts[0] in STATE_NAMES
        or (publish and (parts[0] == RUNS or any(part.startswith(".") for part in parts)))
    ):
        raise ValueError(f"{what}: path {rel[:200]!r} is not a path inside the lake (relative, no '..')")
    return rel


def entry_files(entry: dict) -> list[str]:
    """A manifest entry's files (relative to the root): the one file, or the partitions in key order."""
    return [entry["file"]] if "file" in entry else [entry["partitions"][k] for k in sorted(entry["partitions"])]


def resolve(location: LakeLocation, rel: str) -> str:
    """The store path of a manifest's relative path; on a local lake, refused (SnapshotError) where a
    link on the way leads outside the lake."""
    path = location.path(check_relative(rel, "lake path"))
    if location.is_local and not _inside(location, path):
        raise SnapshotError(f"{path}: leads outside lake {location.root} through a symbolic link; refused")
    return path


def _inside(location: LakeLocation, path: str) -> bool:
    real_root = os.path.realpath(location.root)
    return os.path.realpath(path).startswith(real_root.rstrip(os.sep) + os.sep)


# --- reading ---------------------------------------------------------------------------------------

MAX_POINTER_BYTES = 64  # CURRENT holds one number
MAX_MANIFEST_BYTES = 256 << 20


def read_state(location: LakeLocation, path: str, limit: int) -> bytes | None:
    """The bytes of one of the lake's state files (CURRENT, a manifest), None when it is not there. On
    a local lake the file is opened without following a link (O_NOFOLLOW) and must be a regular file
    reached through no link under the root; past `limit` bytes it is refused. SnapshotError (one line)
    for anything else."""
    if not location.is_local:
        if not filesystem.exists(location, path):
            return None
        with location.filesystem.open_input_stream(path) as stream:
            data = stream.read(limit + 1)
    else:
        if not _inside(location, path) or os.path.realpath(os.path.dirname(path)) != os.path.dirname(path):
            if not os.path.lexists(path):
                return None
            raise SnapshotError(f"{path}: reached through a symbolic link; the lake's state files must be its own")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as err:
            what = "is a symbolic link" if err.errno == errno.ELOOP else f"cannot be read ({err.strerror or err})"
            raise SnapshotError(f"{path}: {what}; the lake's state files must be plain files of its own") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SnapshotError(f"{path}: not a regular file; the lake's state files must be plain files")
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        except OSError as err:
            raise SnapshotError(f"{path}: cannot be read ({err.strerror or err})") from None
        finally:
            os.close(fd)
    if len(data) > limit:
        raise SnapshotError(f"{path}: larger than {limit:,} bytes; not one of the lake's state files")
    return data


def _write_bytes(location: LakeLocation, path: str, data: bytes) -> None:
    """Write atomically: a hidden temporary name beside `path`, then a move (a rename on a local disk,
    which replaces a link in `path`'s place rather than writing through it)."""
    fs = location.filesystem
    parent, name = posixpath.split(path)
    fs.create_dir(parent, recursive=True)
    tmp = posixpath.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        if location.is_local:  # durable before it becomes visible: a crash never serves an empty manifest
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                with open(fd, "wb", closefd=False) as out:
                    out.write(data)
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with fs.open_output_stream(tmp) as out:
                out.write(data)
        fs.move(tmp, path)
    finally:
        if filesystem.exists(location, tmp):
            fs.delete_file(tmp)


def recover_hint(location: LakeLocation) -> str:
    return f"nothing was changed; `autheval lake recover --lake {location.root}` serves a whole snapshot again"


def current_number(location: LakeLocation) -> int | None:
    """The served snapshot's number, or None for a lake that has never committed (no CURRENT and no
    manifest). A pointer that is missing while manifests are there, unreadable, a link, garbage, or
    names a snapshot whose manifest is not there is refused (SnapshotError, one line): nothing is
    ever removed because the pointer is odd."""
    path = location.path(CURRENT)
    try:
        data = read_state(location, path, MAX_POINTER_BYTES)
    except SnapshotError as err:
        raise SnapshotError(f"{err}; {recover_hint(location)}") from None
    if data is None:
        found = snapshot_numbers(location)
        if found:
            raise SnapshotError(
                f"lake {location.root}: {CURRENT} is missing but the lake holds snapshots "
                f"{_numbers(found)}; {recover_hint(location)}"
            )
        return None
    text = data.decode("ascii", "replace").strip()
    if not re.fullmatch(r"[0-9]{1,12}", text, re.ASCII):
        raise SnapshotError(
            f"{path}: names no snapshot ({text[:40]!r}); the lake's pointer is corrupt; {recover_hint(location)}"
        )
    number = int(text)
    if not filesystem.is_file(location, manifest_path(location, number)):
        raise SnapshotError(
            f"{path}: names snapshot {number}, which is not in the lake (on disk: "
            f"{_numbers(snapshot_numbers(location)) or 'none'}); {recover_hint(location)}"
        )
    return number


def _numbers(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers[:20]) + (f", ... ({len(numbers)} in all)" if len(numbers) > 20 else "")


def manifest_path(location: LakeLocation, number: int) -> str:
    return location.path(SNAPSHOTS, f"{number:08d}.json")


PENDING = ".pending-"  # snapshots/.pending-<N>: commit N has begun and CURRENT has not moved yet


def pending_path(location: LakeLocation, number: int) -> str:
    """The marker commit writes before manifest `number` and removes once CURRENT names it: only a
    manifest past CURRENT with its marker is what a killed commit left (and may be removed)."""
    return location.path(SNAPSHOTS, f"{PENDING}{number:08d}")


def pending_numbers(location: LakeLocation) -> list[int]:
    """The numbers of the commits begun and not finished (their markers), ascending."""
    found = []
    for info in filesystem.list_dir(location, location.path(SNAPSHOTS)):
        name = info.base_name
        if name.startswith(PENDING) and re.fullmatch(r"[0-9]{8}", name[len(PENDING) :], re.ASCII):
            found.append(int(name[len(PENDING) :]))
    return sorted(found)


def check_whole(location: LakeLocation, manifest: Manifest) -> None:
    """SnapshotError (one line naming the first missing file and the way back) where `manifest` names a
    file that is not in the lake."""
    missing = missing_files(location, manifest)
    if missing:
        raise SnapshotError(
            f"{location.path(missing[0])}: a file of snapshot {manifest.snapshot} is missing "
            f"({len(missing)} in all); `autheval lake recover --lake {location.root}` serves the newest whole snapshot"
        )


def missing_files(location: LakeLocation, manifest: Manifest) -> list[str]:
    """The files `manifest` names that are not in the lake (relative paths, sorted)."""
    return [rel for rel in sorted(manifest.referenced()) if not filesystem.is_file(location, resolve(location, rel))]


def read_manifest(location: LakeLocation, number: int) -> Manifest:
    """Manifest `number` as it is on disk (committed or not: the writer's own use)."""
    path = manifest_path(location, number)
    data = read_state(location, path, MAX_MANIFEST_BYTES)
    if data is None:
        raise SnapshotError(f"{path}: snapshot {number}'s manifest is not in lake {location.root}")
    manifest = Manifest.from_json(data, path)
    if manifest.snapshot != number:
        raise SnapshotError(f"{path}: names snapshot {manifest.snapshot}, not {number}; not this snapshot's manifest")
    return manifest


def read_committed(location: LakeLocation, number: int) -> Manifest:
    """Committed snapshot `number` (kept, and not past CURRENT: a manifest a killed commit left is
    never served); SnapshotError naming the kept snapshots otherwise."""
    current = current_number(location)
    kept = [n for n in snapshot_numbers(location) if current is not None and n <= current]
    if number not in kept:
        raise SnapshotError(f"snapshot {number} is not kept in lake {location.root} (kept: {_numbers(kept) or 'none'})")
    return read_manifest(location, number)


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


def open_lock(path: Path) -> int:
    """The lake's lock file, opened for the flock: never through a link (O_NOFOLLOW), and only a
    regular file with no other name (a hard link would let the holder's line overwrite a file
    elsewhere). SnapshotError (one line) for anything else."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise SnapshotError(
                f"{path}: the lake's lock is a symbolic link; it is never followed (remove the link)"
            ) from None
        if err.errno in (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOSPC):
            raise  # the machine refuses: exit 1 with the file named
        raise SnapshotError(f"{path}: the lake's lock cannot be opened ({err.strerror or err})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} names"
        raise SnapshotError(f"{path}: the lake's lock is {what}; it must be a plain file of the lake's own (remove it)")
    return fd


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
        for name in (RUNS, SNAPSHOTS, "reports"):
            if (root / name).is_symlink():
                raise SnapshotError(
                    f"{root / name}: a symbolic link; a lake writes only into folders of its own (make it a folder)"
                )
        fd = open_lock(root / LOCK)
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
        check_relative(published, "published file", publish=True)
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
        if self.location.is_local:  # before anything moves: a published file lands inside the lake only
            for published in self._files:
                _check_publish_target(Path(self.location.root), published)
        number = max([base.snapshot, *snapshot_numbers(self.location)]) + 1
        committed = committed_snapshots(self.location)  # before the new manifest is beside them
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
        # the marker first: a manifest past CURRENT without one was committed, and is never removed
        _write_bytes(self.location, pending_path(self.location, number), f"{self.run_id}\n".encode())
        _write_bytes(self.location, manifest_path(self.location, number), manifest.to_json())
        if self.location.is_local:
            build_catalog(Path(self.location.root), manifest, number, self.keep, committed)
        _write_bytes(self.location, self.location.path(CURRENT), f"{number}\n".encode())  # the commit
        with contextlib.suppress(OSError):
            self.location.filesystem.delete_file(pending_path(self.location, number))
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
        pending = pending_numbers(self.location)
        past = [n for n in snapshot_numbers(self.location) if current is None or n > current]
        committed = [n for n in past if n not in pending]
        if committed:  # written by a finished commit (CURRENT was moved back by hand): never removed
            raise SnapshotError(
                f"lake {self.location.root}: snapshot(s) {_numbers(committed)} past CURRENT "
                f"({current if current is not None else 'none'}) were committed, not left by a killed commit; "
                f"nothing was removed: `autheval lake recover --lake {self.location.root} --snapshot N` "
                "serves the one you mean"
            )
        for number in past:
            self.location.filesystem.delete_file(manifest_path(self.location, number))
        for number in pending:
            with contextlib.suppress(OSError):
                self.location.filesystem.delete_file(pending_path(self.location, number))
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
        """Keep the snapshots of the last `keep` runs (a run that commits several snapshots, as `autheval
        monitor run` does, one per landed file, is one kept unit): older manifests and catalogs go, and
        so does every file under runs/ that no kept snapshot names (this run's staged files excepted)."""
        current = current_number(self.location)
        numbers = [n for n in snapshot_numbers(self.location) if current is not None and n <= current]
        referenced: set[str] = set(self._written)
        run_ids: list[str] = []
        kept: list[int] = []
        for number in reversed(numbers):  # newest first, until a run past the last `keep` runs
            manifest = read_manifest(self.location, number)
            if manifest.run_id not in run_ids:
                if len(run_ids) == self.keep:
                    break
                run_ids.append(manifest.run_id)
            kept.append(number)
            referenced |= manifest.referenced()
        dropped = [n for n in numbers if n not in kept]
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
        for path in _run_files(self.location, runs):
            rel = posixpath.relpath(path, self.location.root)
            if rel not in referenced:
                with contextlib.suppress(OSError):
                    self.location.filesystem.delete_file(path)
        for info in filesystem.list_dir(self.location, runs):
            if info.type == pafs.FileType.Directory:
                _remove_empty_dirs(self.location, info.path)


def _run_files(location: LakeLocation, runs: str) -> list[str]:
    """Every file under runs/ (store paths). On a local lake a link is listed as itself and never
    followed: a link to a folder elsewhere is no way to remove the files there."""
    if not location.is_local:
        selector = pafs.FileSelector(runs, recursive=True, allow_not_found=True)
        return [info.path for info in location.filesystem.get_file_info(selector) if info.type == pafs.FileType.File]
    found = []
    for folder, dirs, files in os.walk(runs, followlinks=False):
        found += [os.path.join(folder, name) for name in files]
        found += [os.path.join(folder, name) for name in dirs if os.path.islink(os.path.join(folder, name))]
    return found


def _check_publish_target(root: Path, published: str) -> None:
    """A published file's place is inside the lake: no folder on its way is a link leading out."""
    check_relative(published, "published file", publish=True)
    parent = (root / published).parent
    if not os.path.realpath(parent).startswith(os.path.realpath(root).rstrip(os.sep) + os.sep) and parent != root:
        raise SnapshotError(
            f"{root / published}: a folder on its way leads outside lake {root} (a symbolic link); "
            "nothing was published"
        )


def recover_pointer(location: LakeLocation, number: int | None = None, software: str = "") -> str:
    """`autheval lake recover`: serve a whole committed snapshot again after the pointer (CURRENT) was
    lost, corrupted, or names a snapshot that is not there; nothing is removed. Under the writer lock:
    `number` (default: the newest manifest whose files are all there) is checked whole; the newest
    manifest on disk is served as it is, an older one is committed again as a new snapshot with its
    tables (so the newer ones stay, and the next writer removes nothing of them); an odd CURRENT (a
    link, a folder, garbage) is renamed aside, never removed. Returns one line saying what was done."""
    run = LakeRun(location, new_run_id("recover"), dict, software=software)
    with _ACTIVE_LOCK:
        if _ACTIVE.get(location.uri()) is not None:
            raise LakeBusy(f"lake {location.root} in use by run {_ACTIVE[location.uri()].run_id} (this process)")
        run._acquire()
    try:
        return _recover_pointer(location, number, run)
    finally:
        if run._lock_fd is not None:
            os.close(run._lock_fd)
            run._lock_fd = None


def _recover_pointer(location: LakeLocation, number: int | None, run: LakeRun) -> str:
    on_disk = snapshot_numbers(location)
    if not on_disk:
        raise SnapshotError(f"lake {location.root}: no snapshot manifest in {SNAPSHOTS}/; nothing to recover")
    try:
        served = current_number(location)
    except SnapshotError:
        served = None
    problems: list[str] = []
    chosen = None
    # left by a killed commit (its marker, past CURRENT): not a snapshot to serve unless asked for by number
    unfinished = {n for n in pending_numbers(location) if served is not None and n > served}
    candidates = [number] if number is not None else [n for n in sorted(on_disk, reverse=True) if n not in unfinished]
    for candidate in candidates:
        if candidate not in on_disk:
            raise SnapshotError(
                f"snapshot {candidate} has no manifest in lake {location.root} (on disk: {_numbers(on_disk)})"
            )
        try:
            manifest = read_manifest(location, candidate)
            missing = missing_files(location, manifest)
        except SnapshotError as err:
            problems.append(str(err))
            continue
        if missing:
            problems.append(f"snapshot {candidate} misses {len(missing)} file(s), e.g. {missing[0]}")
            continue
        chosen = manifest
        break
    if chosen is None:
        raise SnapshotError(f"lake {location.root}: no whole snapshot to serve: {'; '.join(problems)[:400]}")
    if chosen.snapshot == served:  # whole (its files checked), and the newest whole one or the one asked for
        return f"lake {location.root}: CURRENT names snapshot {served}, which is whole; nothing to recover"
    pointer = location.path(CURRENT)
    aside = ""
    if served is None and location.is_local and os.path.lexists(pointer):
        aside = f"{pointer}.odd-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
        os.rename(pointer, aside)
        aside = f"; the odd CURRENT was moved to {aside}"
    newest = max(on_disk)
    if chosen.snapshot != newest:  # an older one: committed again, so the newer ones are not past CURRENT
        chosen = Manifest(newest + 1, run.run_id, newest, _now(), dict(chosen.tables), dict(chosen.files), run.software)
        _write_bytes(location, manifest_path(location, chosen.snapshot), chosen.to_json())
    if location.is_local:
        committed = []
        for n in on_disk:
            if n < chosen.snapshot:
                with contextlib.suppress(SnapshotError):  # an unreadable older one is just not listed
                    committed.append(read_manifest(location, n))
        build_catalog(Path(location.root), chosen, chosen.snapshot, run.keep, committed)
    _write_bytes(location, pointer, f"{chosen.snapshot}\n".encode())
    if location.is_local:
        link_served_catalog(Path(location.root), chosen.snapshot)
    how = f"snapshot {chosen.snapshot}"
    if number is not None and chosen.snapshot != number:
        how += f" (the tables of snapshot {number}, committed again)"
    return f"lake {location.root}: now serving {how}; nothing was removed{aside}"


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
