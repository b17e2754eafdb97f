"""Lake paths as URIs, through pyarrow's filesystems.

A lake root is a local path (`warehouse/lake`), a `file://` URI, or an object-store URI (`s3://bucket/
lake`, `gs://...`, `abfs://...`, `hdfs://...`: whatever `pyarrow.fs.FileSystem.from_uri` knows). Every
one resolves to a (filesystem, path) pair, and the lake reads, writes and lists tables through that
pair only, so a local path and a `file://` URI take exactly the same code path, and an object store
takes it too (credentials come from the filesystem's usual environment, e.g. AWS_* for S3).

Atomic replacement: a table is written under a hidden temporary name beside its target, then moved
over it. On a local disk the move is a rename (readers see the old file or the new one, never half);
on an object store the new object appears whole when its upload completes (a move there is copy +
delete, and no reader ever sees a partial object). A failed write removes its temporary file.
Nothing here imports Dagster.
"""

from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

LOCAL_SCHEME = "file"


@dataclass(frozen=True)
class LakeLocation:
    """Where a lake lives: a pyarrow filesystem and the root path inside it."""

    filesystem: pafs.FileSystem
    root: str  # a path inside `filesystem` (absolute for the local one), no scheme
    scheme: str  # 'file' for a local path or file:// URI, else the URI's scheme (s3, gs, ...)

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL_SCHEME

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def uri(self, *parts: str) -> str:
        """The URI of a path under the root (`file:///...` locally)."""
        path = self.path(*parts)
        return Path(path).as_uri() if self.is_local else f"{self.scheme}://{path.lstrip('/')}"

    def local_root(self) -> Path | PurePosixPath:
        """The root as a Path for a local lake (what the catalog, reports and landing folder use), else
        the store path (those local-only parts do not apply to an object-store lake)."""
        return Path(self.root) if self.is_local else PurePosixPath(self.root)


def lake_location(root: str | Path) -> LakeLocation:
    """Resolve a lake root (local path or URI) to its filesystem and path."""
    text = str(root)
    if "://" in text:
        filesystem, path = pafs.FileSystem.from_uri(text)
        scheme = text.split("://", 1)[0].lower()
        if isinstance(filesystem, pafs.LocalFileSystem):
            return LakeLocation(filesystem, str(Path(path).resolve()), LOCAL_SCHEME)
        return LakeLocation(filesystem, path.rstrip("/"), scheme)
    return LakeLocation(pafs.LocalFileSystem(), str(Path(text).resolve()), LOCAL_SCHEME)


# Characters a local lake's folder may not hold: the lake opens databases inside it by URL or URL-like path
# (its DuckDB catalog, whose path DuckDB cuts at a '?'; the SQLite files of its Dagster instance, whose URL
# is neither quoted nor safe from '%' escapes), and DuckDB reads its Parquet files' paths as globs (a '*'
# read a sibling folder's files too), so such a folder failed later, or read what is not the lake's.
LAKE_PATH_UNSAFE = "?%*"


def check_lake_folder(location: LakeLocation) -> None:
    """ValueError (one line naming the folder) for a local lake whose path holds a LAKE_PATH_UNSAFE
    character."""
    unsafe = sorted({c for c in location.root if c in LAKE_PATH_UNSAFE}) if location.is_local else []
    if unsafe:
        raise ValueError(
            f"lake folder {location.root!r}: a lake's path must not hold {' or '.join(repr(c) for c in unsafe)} "
            "(its databases are opened by URL and its files read as globs); choose another folder"
        )


def exists(location: LakeLocation, path: str) -> bool:
    return location.filesystem.get_file_info(path).type != pafs.FileType.NotFound


def is_file(location: LakeLocation, path: str) -> bool:
    return location.filesystem.get_file_info(path).type == pafs.FileType.File


def is_dir(location: LakeLocation, path: str) -> bool:
    return location.filesystem.get_file_info(path).type == pafs.FileType.Directory


def list_dir(location: LakeLocation, path: str) -> list[pafs.FileInfo]:
    """The entries directly under `path`, sorted by name (none when it does not exist)."""
    if not is_dir(location, path):
        return []
    infos = location.filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(infos, key=lambda info: info.base_name)


def write_parquet(location: LakeLocation, path: str, table: pa.Table) -> str:
    """Write `table` to `path` atomically (a hidden temporary name beside it, then a move)."""
    fs = location.filesystem
    parent, name = posixpath.split(path)
    fs.create_dir(parent, recursive=True)
    tmp = posixpath.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp, filesystem=fs, compression="zstd")
        fs.move(tmp, path)
    finally:
        if exists(location, tmp):
            fs.delete_file(tmp)
    return path


def touch(location: LakeLocation, path: str) -> None:
    """Create an empty file (a marker) if it is not there."""
    if not exists(location, path):
        location.filesystem.create_dir(posixpath.dirname(path), recursive=True)
        with location.filesystem.open_output_stream(path):
            pass


def read_parquet(location: LakeLocation, paths: str | list[str]) -> pa.Table:
    """One Parquet file, or several read as one table (the partitions of a table)."""
    if isinstance(paths, str):
        return pq.read_table(paths, filesystem=location.filesystem)
    return pq.ParquetDataset(paths, filesystem=location.filesystem).read()
