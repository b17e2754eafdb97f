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
MAX_COLUMNS = 4096  # a record file's columns: checked before any schema, table or reader is built from them
MAX_HEADER_BYTES = 1 << 20  # a CSV header row longer than this is refused before it is parsed whole


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
    """SHA-256 of a table's Arrow IPC bytes: the data hash of records that never were one file. The
    bytes are hashed as they are written, never held (a copy of the table, twice, before)."""
    return _stream_sha256(table.to_reader())


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


def missing_file_rule(path: str | Path) -> str:
    """Why `path` is not a readable regular file, as a refusal's rule: not found, a folder, or a FIFO,
    socket or device (never opened: a FIFO would block the reader)."""
    path = Path(path)
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists():
        return "not a regular file (a FIFO, a socket or a device)"
    return "file not found"


def read_table(path: str | Path) -> pa.Table:
    """Read a CSV (every column as text, so bad values can be named) or a Parquet file."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise RecordError(source, None, missing_file_rule(path))
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        if path.stat().st_size == 0:
            raise RecordError(source, None, "file is empty")
        return _unique_names(_read_csv_text(path), source)
    if name.endswith(PARQUET_SUFFIXES):
        try:  # ParquetFile, not pq.read_table: the dataset layer it goes through imports pandas (slow)
            with pq.ParquetFile(path) as handle:
                if handle.metadata.num_columns > MAX_COLUMNS:
                    raise RecordError(
                        source, None, f"has {handle.metadata.num_columns:,} columns; at most {MAX_COLUMNS:,} are read"
                    )
                return _unique_names(handle.read(), source)
        except (pa.ArrowInvalid, OSError) as err:
            first = str(err).strip().splitlines()[0]
            raise RecordError(source, None, f"cannot be read as Parquet: {first}") from err
    raise RecordError(source, None, "unknown file type: expected .csv, .csv.gz, .tsv, .parquet or .pq")


def _unique_names(table: pa.Table, source: str) -> pa.Table:
    """A table whose columns each have their own name: a name given twice (a CSV header `a,a` keeps
    both) would make the second column's values stand for the first's, so it is refused."""
    seen: set[str] = set()
    for column in table.column_names:
        if column in seen:
            raise RecordError(source, column, "the header names this column more than once (duplicate column)")
        seen.add(column)
    return table


def _read_csv_text(path: Path) -> pa.Table:
    """Every column as text (so a bad value can be named, not coerced); empty cells are null."""
    from pyarrow import csv

    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    parse = csv.ParseOptions(delimiter=delimiter)
    csv_header(path, delimiter)  # bounded: no reader is built for a million columns
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


def csv_header(path: Path, delimiter: str) -> list[str]:
    """A CSV file's header row, read within bounds: at most MAX_HEADER_BYTES of text and MAX_COLUMNS
    names, else one line before any table, schema or reader is built from it."""
    import csv
    import gzip
    import io

    source = str(path)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        # undecodable bytes kept as surrogates: the rows after the header are the reader's to judge
        with opener(path, "rt", encoding="utf-8", errors="surrogateescape", newline="") as handle:
            text = handle.read(MAX_HEADER_BYTES + 1)
        lines = io.StringIO(text)
        header = next(csv.reader(lines, delimiter=delimiter), None)
    except (OSError, EOFError, csv.Error) as err:
        raise RecordError(source, None, f"cannot be read as CSV: {_first_message(err)}") from err
    if len(text) > MAX_HEADER_BYTES and lines.tell() >= len(text):  # the header did not end within the bound
        raise RecordError(source, None, f"the header row is longer than {MAX_HEADER_BYTES:,} characters")
    if not header:
        raise RecordError(source, None, "cannot be read as CSV: no header row")
    try:
        "".join(header).encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(source, None, "cannot be read as CSV: the header row is not UTF-8 text") from None
    if len(header) > MAX_COLUMNS:
        raise RecordError(source, None, f"the header has {len(header):,} columns; a record has at most {MAX_COLUMNS:,}")
    return header


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


def _split_glob(path: str) -> tuple[str, str | None]:
    """(the folder to list, the glob relative to it) of a path holding glob characters, else (path, None)."""
    if not any(c in path for c in GLOB_CHARACTERS):
        return path, None
    head = path[: min(path.index(c) for c in GLOB_CHARACTERS if c in path)]
    base = head.rstrip("/") if head.endswith("/") else posixpath.dirname(head)
    return base, path[len(base) :].lstrip("/")


def _split_uri(source: str, text: str) -> tuple[str, str | None]:
    """(the URI to open, the glob of its path or None): parsed as a URI, so its query string
    (`?endpoint_override=...&region=...`, read by pyarrow's `FileSystem.from_uri`) is kept whole and
    only its path is globbed; what cannot be honoured is refused in one line."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(text)
    except ValueError as err:  # a bad IPv6 host, a bad port
        raise RecordError(source, None, f"not a valid URI: {err}") from None
    scheme = parts.scheme.lower()
    if "#" in text:
        raise RecordError(source, None, "a URI fragment ('#...') cannot be honoured: name the data by its path")
    if parts.query and scheme == "file":
        raise RecordError(source, None, "a file:// URI takes no query string ('?...'): it would be ignored")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True) if parts.query else []
    except ValueError:
        raise RecordError(source, None, "the URI's query string is not KEY=VALUE pairs joined by '&'") from None
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise RecordError(source, None, f"the URI's query names {key!r} twice: which one is meant is unclear")
    _check_host_port(source, "the URI's host", parts.netloc, scheme)
    for key, value in pairs:
        if "endpoint" in key.lower() or key.lower() in ("host", "proxy_options"):
            _check_host_port(source, f"the URI's {key}", value, scheme)
    base, pattern = _split_glob(parts.path)
    opened = f"{text[: text.index('://')]}://{parts.netloc}{base}" + (f"?{parts.query}" if parts.query else "")
    return opened, None if pattern is None else unquote(pattern)


HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]%")


def _check_host_port(source: str, what: str, value: str, scheme: str) -> None:
    """A host[:port] (or scheme://host[:port]) given in a URI: a port from 1 to 65535 (pyarrow would
    wrap 99999 to another port), a host of letters, digits, `.`, `-`, `_` or an [IPv6] address."""
    from urllib.parse import urlsplit

    if not value or (what == "the URI's host" and scheme == "file"):
        return
    text = value if "://" in value else f"//{value}"
    try:
        parts = urlsplit(text)
        netloc, port = parts.netloc.rsplit("@", 1)[-1], parts.port
    except ValueError:
        raise RecordError(source, None, f"{what} {value!r}: the port must be a number from 1 to 65535") from None
    if port is not None and not 1 <= port <= 65535:
        raise RecordError(source, None, f"{what} {value!r}: the port must be a number from 1 to 65535")
    if netloc.endswith(":") or (parts.path not in ("", "/") and what != "the URI's host"):
        raise RecordError(source, None, f"{what} {value!r}: expected HOST or HOST:PORT")
    if not parts.hostname or not set(netloc) <= HOST_CHARACTERS:
        raise RecordError(source, None, f"{what} {value!r}: not a host name or address")


def _open_location(source: str, text: str):
    """warehouse.filesystem.lake_location of `text`, its refusals (an unknown scheme, a query parameter
    the store does not take, a missing bucket, a filesystem that cannot start) in one line."""
    from warehouse.filesystem import lake_location

    try:
        return lake_location(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as err:
        message = _first_message(err)
        if "Unrecognized filesystem type" in message:
            scheme = text.split("://", 1)[0]
            raise RecordError(
                source, None, f"unsupported URI scheme {scheme!r}: expected file, s3, gs, abfs or hdfs (pyarrow's)"
            ) from None
        raise RecordError(source, None, f"cannot open the URI: {message}") from None


def _first_message(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _may_hold(relative_folder: str, pattern: str | None) -> bool:
    """Whether a folder (`sub/`, relative to the glob's root) can hold a path `pattern` matches: the
    pattern's fixed start and the folder's path agree as far as both go (`*` spans folders)."""
    if pattern is None:
        return True
    cut = [pattern.index(c) for c in GLOB_CHARACTERS if c in pattern]
    fixed = pattern[: min(cut)] if cut else pattern
    return relative_folder.startswith(fixed) or fixed.startswith(relative_folder)


def _local_files(source: str, root: str, pattern: str | None = None) -> list[tuple[str, str]]:
    """(path, path relative to `root`) of every regular file under the local folder `root`, hidden
    parts skipped, links followed but each folder and each file visited once: a folder reached again
    (a link loop such as `x -> .`, or a second name of a folder) and a file reached twice (a link or a
    hard link beside its target) are refused in one line naming the link, as is a broken link or a
    record-named entry that is not a regular file (a FIFO would block the reader). With a glob `pattern`,
    only what it can match is listed and checked: folders it cannot reach are not entered, and an entry it
    does not match is never a refusal."""
    import os
    import stat

    def identity(st) -> tuple[int, int]:
        return st.st_dev, st.st_ino

    folders = {identity(os.stat(root)): root}
    files: dict[tuple[int, int], str] = {}
    found: list[tuple[str, str]] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as entries:
            listed = sorted(entries, key=lambda e: e.name)
        for entry in listed:
            relative = f"{prefix}{entry.name}"
            if _hidden(entry.name):
                continue
            matched = pattern is None or fnmatch.fnmatchcase(relative, pattern)
            if not (matched or _may_hold(relative + "/", pattern)):
                continue
            try:
                st = os.stat(entry.path)  # through a link
            except OSError:
                if not matched:
                    continue
                if entry.is_symlink():
                    raise RecordError(entry.path, None, "a broken symbolic link in a dataset folder") from None
                raise
            if stat.S_ISDIR(st.st_mode):
                if not _may_hold(relative + "/", pattern):
                    continue
                seen = folders.get(identity(st))
                if seen is not None:
                    raise RecordError(
                        entry.path,
                        None,
                        f"leads to a folder already listed ({seen}): a symbolic link loop or a second name "
                        "of a folder (each file of a dataset is read once)",
                    )
                folders[identity(st)] = entry.path
                pending.append((entry.path, relative + "/"))
            elif not matched:
                continue
            elif stat.S_ISREG(st.st_mode):
                seen = files.get(identity(st))
                if seen is not None:
                    raise RecordError(
                        entry.path, None, f"is the same file as {seen} (a link): each file of a dataset is read once"
                    )
                files[identity(st)] = entry.path
                found.append((entry.path, relative))
            elif pattern is not None or entry.name.lower().endswith(CSV_SUFFIXES + PARQUET_SUFFIXES):
                raise RecordError(entry.path, None, "not a regular file (a FIFO, a socket or a device)")
    return found


def _store_files(location) -> list[tuple[str, str]]:
    """(path, path relative to the root) of every file under an object store's prefix, hidden parts skipped."""
    import pyarrow.fs as pafs

    found = []
    for entry in location.filesystem.get_file_info(pafs.FileSelector(location.root, recursive=True)):
        relative = entry.path[len(location.root) :].lstrip("/")
        if entry.type == pafs.FileType.File and not _hidden(relative):
            found.append((entry.path, relative))
    return found


def dataset_files(source: str | Path):
    """(location, [paths in name order], [display names]) of the record files `source` names: one
    file, every Parquet file under a folder (hidden ones skipped; a folder also holding CSV files is
    refused, naming the folder; a local folder of CSV files only gives its CSV files, as does a local glob
    matching CSV files only), those a glob matches (`*` spans folders), or the same through a URI
    (file://, an object store: warehouse.filesystem's seam), parsed as a URI: its query string goes to
    the store, only its path is globbed."""
    import pyarrow.fs as pafs

    text = str(source)
    if "://" in text:
        text, pattern = _split_uri(str(source), text)
    elif not Path(text).exists():  # an existing file's or folder's own name is never a pattern
        text, pattern = _split_glob(text)
        text = text or "."
    else:
        pattern = None
    location = _open_location(str(source), text)
    fs = location.filesystem
    try:
        kind = fs.get_file_info(location.root).type
    except OSError as err:  # a store that cannot be reached: the machine's refusal (exit 1), naming the input
        raise OSError(err.errno or 0, f"cannot be reached: {_first_message(err)}", str(source)) from None
    if kind == pafs.FileType.NotFound:
        raise RecordError(str(source), None, "file not found" if pattern is None else "no such folder")
    if kind == pafs.FileType.File and pattern is None:
        paths = [location.root]
    else:
        if location.is_local:
            listed = _local_files(str(source), location.root, pattern)
        else:
            try:
                listed = _store_files(location)
            except OSError as err:
                raise OSError(err.errno or 0, f"cannot be listed: {_first_message(err)}", str(source)) from None
        others = []
        if pattern is None:
            others = sorted(r for _, r in listed if r.lower().endswith(CSV_SUFFIXES))
            if others and any(_is_parquet(r) for _, r in listed):
                raise RecordError(
                    str(source),
                    None,
                    f"the folder mixes Parquet and CSV files ({others[0]}): a dataset of files is Parquet "
                    "only; name one CSV file, or move the other files out",
                )
        paths = sorted(p for p, r in listed if (fnmatch.fnmatchcase(r, pattern) if pattern else _is_parquet(r)))
        if not paths and others and location.is_local:  # a local folder of CSV files only: one CSV dataset
            paths = sorted(p for p, r in listed if r.lower().endswith(CSV_SUFFIXES))
        if not paths:
            what = f"no file matches {pattern!r}" if pattern else "the folder holds no Parquet file (.parquet, .pq)"
            if not pattern and others:
                what += f" but CSV files ({others[0]}): a CSV dataset of several files is read from a local folder"
            raise RecordError(str(source), None, what)
    names = [path if location.is_local else f"{location.scheme}://{path.lstrip('/')}" for path in paths]
    all_csv = location.is_local and all(p.lower().endswith(CSV_SUFFIXES) for p in paths)
    for path, name in zip(paths, names):
        if not all_csv and not _is_parquet(path):
            raise RecordError(
                name, None, "unknown file type: a dataset of files is Parquet (.parquet, .pq), or CSV only"
            )
        check_readable_name(name)
    return location, paths, names


def check_readable_name(name: str) -> None:
    """DuckDB takes `*`, `?` and `[` in a path it is given as a pattern (`a[1].parquet` reads
    `a1.parquet`): a record file so named is refused, never read as another file."""
    if any(c in name.split("://", 1)[-1] for c in GLOB_CHARACTERS):
        raise RecordError(
            name, None, "a record file whose path holds *, ? or [ cannot be read as itself: rename it or its folder"
        )


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
