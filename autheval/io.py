"""Record files and tables: reading one whole (CSV as text, Parquet) and their SHA-256 data hashes.

The lowest layer of reading records, imported by records/, raw/, models/ and the lake alike: a file's or
a dataset's data hash (`file_sha256`, `data_sha256`: for a dataset of several Parquet files, the SHA-256
of their SHA-256s in name order), an in-memory table's (`table_sha256`, or `_stream_sha256` batch by
batch), and `read_table` with the CSV quirks it checks (a wrong delimiter, every cell as text). Listing a
dataset's files (`dataset_files`: a folder, a glob, a URI through warehouse/filesystem.py's seam) lives
here too, because a file hash of a dataset path needs it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from autheval.errors import RecordError

OTHER_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe", ",": "comma"}
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")
GLOB_CHARACTERS = "*?["


def file_sha256(path: str | Path) -> str:
    """A file's SHA-256; for a record dataset (a folder, a glob, a URI) its data hash (data_sha256),
    so a receipt names and verify re-hashes a dataset input as it does a file."""
    if is_dataset_path(path):
        return data_sha256(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def table_sha256(table: pa.Table) -> str:
    """SHA-256 of a table's Arrow IPC bytes: the data hash of records that never were one file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


class _HashSink:
    """A write-only file that hashes what is written to it."""

    closed = False

    def __init__(self):
        self.digest = hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _stream_sha256(reader: pa.RecordBatchReader) -> str:
    """table_sha256 of the table `reader` would read, one batch at a time (the same IPC bytes)."""
    sink = _HashSink()
    with pa.PythonFile(sink, mode="w") as handle, pa.ipc.new_stream(handle, reader.schema.remove_metadata()) as writer:
        for batch in reader:
            writer.write_batch(batch)
    return sink.digest.hexdigest()


def read_table(path: str | Path) -> pa.Table:
    """Read a CSV (every column as text, so bad values can be named) or a Parquet file."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise RecordError(source, None, "file not found")
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        if path.stat().st_size == 0:
            raise RecordError(source, None, "file is empty")
        return _read_csv_text(path)
    if name.endswith(PARQUET_SUFFIXES):
        try:  # ParquetFile, not pq.read_table: the dataset layer it goes through imports pandas (slow)
            with pq.ParquetFile(path) as handle:
                return handle.read()
        except (pa.ArrowInvalid, OSError) as err:
            first = str(err).strip().splitlines()[0]
            raise RecordError(source, None, f"cannot be read as Parquet: {first}") from err
    raise RecordError(source, None, "unknown file type: expected .csv, .csv.gz, .tsv, .parquet or .pq")


def _read_csv_text(path: Path) -> pa.Table:
    """Every column as text (so a bad value can be named, not coerced); empty cells are null."""
    from pyarrow import csv

    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    parse = csv.ParseOptions(delimiter=delimiter)
    try:
        _check_delimiter(path, delimiter)
        with csv.open_csv(path, parse_options=parse) as reader:  # the header gives the column names
            names = reader.schema.names
        convert = csv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=True,
        )
        return csv.read_csv(path, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, StopIteration) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no header row"
        raise RecordError(str(path), None, f"cannot be read as CSV: {first}") from err


def _check_delimiter(path: Path, delimiter: str) -> None:
    """A header that is one column which another delimiter would split: say so, instead of a parse
    error or a missing column."""
    import csv
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as handle:
            header = handle.readline().rstrip("\r\n")
    except OSError:
        return  # unreadable: the CSV reader says why
    names = next(csv.reader([header], delimiter=delimiter), [])
    if len(names) != 1:
        return
    for other, label in OTHER_DELIMITERS.items():
        if other != delimiter and len(names[0].split(other)) > 1:
            expected = OTHER_DELIMITERS[delimiter]
            raise RecordError(
                str(path),
                None,
                f"the delimiter looks wrong: the header is one column holding {label}s "
                f"({names[0][:60]!r}); expected {expected}-separated columns",
            )


def is_dataset_path(path: str | Path) -> bool:
    """A folder, a glob or a URI: records that `read_records` reads as a dataset of files."""
    text = str(path)
    if "://" in text:
        return True
    return Path(text).is_dir() or (any(c in text for c in GLOB_CHARACTERS) and not Path(text).is_file())


def _is_parquet(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES)


def _hidden(relative: str) -> bool:
    """A path part that Spark and Hive skip too: `.name` (temporary files) or `_name` (markers)."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def dataset_files(source: str | Path):
    """(location, [paths in name order], [display names]) of the Parquet files `source` names: one
    file, every Parquet file under a folder (hidden ones skipped), those a glob matches (`*` spans
    folders), or the same through a URI (file://, an object store: warehouse.filesystem's seam)."""
    import pyarrow.fs as pafs

    from warehouse.filesystem import lake_location

    text, pattern = str(source), None
    if any(c in text for c in GLOB_CHARACTERS):
        head = text[: min(text.index(c) for c in GLOB_CHARACTERS if c in text)]
        base = head.rstrip("/") if head.endswith("/") else posixpath.dirname(head)
        pattern = text[len(base) :].lstrip("/")
        text = base or "."
    location = lake_location(text)
    fs = location.filesystem
    kind = fs.get_file_info(location.root).type
    if kind == pafs.FileType.NotFound:
        raise RecordError(str(source), None, "file not found" if pattern is None else "no such folder")
    if kind == pafs.FileType.File and pattern is None:
        paths = [location.root]
    else:
        paths = []
        for entry in fs.get_file_info(pafs.FileSelector(location.root, recursive=True)):
            relative = entry.path[len(location.root) :].lstrip("/")
            if entry.type != pafs.FileType.File or _hidden(relative):
                continue
            if fnmatch.fnmatchcase(relative, pattern) if pattern is not None else _is_parquet(entry.base_name):
                paths.append(entry.path)
        paths.sort()
        if not paths:
            what = f"no file matches {pattern!r}" if pattern else "the folder holds no Parquet file (.parquet, .pq)"
            raise RecordError(str(source), None, what)
    names = [path if location.is_local else f"{location.scheme}://{path.lstrip('/')}" for path in paths]
    for path, name in zip(paths, names):
        if not _is_parquet(path):
            raise RecordError(name, None, "unknown file type: a dataset of files is Parquet (.parquet or .pq)")
    return location, paths, names


def dataset_sha256(location, paths: Sequence[str]) -> str:
    """The data hash of a dataset: for one file, that file's SHA-256 (so a file hashes the same
    however it is named: a path, a folder holding it, a URI); for several, the SHA-256 of the ASCII
    text made of each file's SHA-256 in hex followed by a newline, the files in name order. Every file
    is hashed streaming (1 MiB blocks), so no rows are held."""
    digests = []
    for path in paths:
        digest = hashlib.sha256()
        with location.filesystem.open_input_stream(path) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests.append(digest.hexdigest())
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(d + "\n" for d in digests).encode("ascii")).hexdigest()


def data_sha256(source: str | Path) -> str:
    """The data hash of a record input: a file's SHA-256, or a dataset's (`dataset_sha256`)."""
    if not is_dataset_path(source):
        return file_sha256(source)
    location, paths, _ = dataset_files(source)
    return dataset_sha256(location, paths)
