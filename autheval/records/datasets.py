"""Records as a dataset of files read where they lie: RecordDataset, opening one, scanning it on DuckDB.

A CSV file, a Parquet file, a folder or glob of Parquet files, or a URI (`file://`, or an object store
through the lake's filesystem seam, registered on DuckDB by fsspec) becomes a `RecordDataset`
(`open_dataset`: the header checked on the file schemas alone, no row read), which DuckDB scans
(read_csv / read_parquet over the file list: sql/records/records_dataset_<kind>.sql). Listing the files
and hashing them is autheval/io.py's (`dataset_files`, `data_sha256`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from autheval.errors import RecordError
from autheval.io import (
    CSV_SUFFIXES,
    MAX_COLUMNS,
    _check_delimiter,
    _is_parquet,
    check_readable_name,
    csv_header,
    dataset_files,
    dataset_sha256,
    file_sha256,
    is_dataset_path,
    missing_file_rule,
)
from autheval.records.schema import LOG_COLUMNS, column_mapping
from warehouse.sql import fill, quote_literal

MAX_FOOTER_BYTES = 64 << 20  # a Parquet footer (the schema and row-group index) larger than this is refused
ROW_BITS = 40  # a dataset row's row_index: (file number << ROW_BITS) + its row within the file
FSSPEC_PREFIX = "autheval"  # DuckDB reads an object store through the seam as autheval<scheme>://


@dataclass(frozen=True)
class RecordDataset:
    """Record files read where they lie, in name order: one CSV file, or Parquet files (one, a
    folder's, a glob's, a URI's). `files`: what DuckDB reads (local paths, or an object store's paths
    through the filesystem seam); `names`: each file as messages name it (and Spark reads it);
    `columns`: canonical column -> the input's column (`c<i>` for a CSV's i-th column)."""

    source: str  # as the user named it
    kind: str  # 'parquet' or 'csv'
    schema: str  # 'log' or 'trace'
    files: tuple[str, ...]
    names: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    n_rows: int | None = None  # from the Parquet footers (a CSV's is known once it is scanned)
    width: int = 0  # a CSV's columns
    delimiter: str = ","
    filesystem: object = field(default=None, compare=False)  # an object store's pyarrow filesystem
    protocol: str | None = None  # the fsspec protocol DuckDB reads `files` through (object stores)
    analysis: str | None = None  # kind 'lake': the one analysis of a lake table that these records are

    def locate(self, row_index: int) -> tuple[str, int]:
        """(the file, the row within it) of a row_index; the dataset's own name for one file."""
        if len(self.files) == 1 or self.kind == "lake":  # a lake analysis' rows are numbered in case_id order
            return self.source, row_index
        return self.names[row_index >> ROW_BITS], row_index & ((1 << ROW_BITS) - 1)

    def scan(self, con, view: str) -> None:
        """Create the temporary view `view` on `con`: every input column as the files give it, beside
        `_autheval_row` (the row_index), read streaming (sql/records_dataset_<kind>.sql)."""
        if self.protocol is not None:
            _register_filesystem(con, self.protocol, self.filesystem)
        if self.kind == "csv" and len(self.files) > 1:
            self._scan_csv_files(con, view)
            return
        literals, fragments = {}, {"files": path_list(self.files)}
        if self.kind == "lake":
            assert self.analysis is not None  # a lake dataset is one analysis (records.read.lake_analysis_records)
            literals["analysis"] = self.analysis
        if self.kind == "csv":
            fragments["columns"] = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(self.width)) + "}"
            literals["delimiter"] = self.delimiter
        name = f"records/records_dataset_{self.kind}"
        con.execute(fill(name, identifiers={"view": view}, literals=literals, fragments=fragments))

    def _scan_csv_files(self, con, view: str) -> None:
        """The view `view` over several CSV files: each file scanned as one CSV file is (its own view), its
        rows numbered (file number << ROW_BITS) + the row within it, the files in name order."""
        from duckdb import ColumnExpression, ConstantExpression, StarExpression

        columns = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(self.width)) + "}"
        union = None
        for number, path in enumerate(self.files):
            part = f"{view}_file_{number}"
            delimiter = "\t" if path.lower().endswith(".tsv") else ","
            con.execute(
                fill(
                    "records/records_dataset_csv",
                    identifiers={"view": part},
                    literals={"delimiter": delimiter},
                    fragments={"files": path_list([path]), "columns": columns},
                )
            )
            row = (ColumnExpression("_autheval_row") + ConstantExpression(number << ROW_BITS)).alias("_autheval_row")
            relation = con.table(part).select(row, StarExpression(exclude=["_autheval_row"]))
            union = relation if union is None else union.union(relation)
        assert union is not None
        union.create_view(view)

    def raw_records(self, con, view: str, analysis: str):
        """A lazy relation over the scan `view`: the analysis label, row_index and the record's
        columns in the log's names (absent ones NULL, cluster_id = case_id where a log has none): the
        layout of records/records_validate.sql's raw_records, plus `analysis`."""
        from duckdb import ColumnExpression, ConstantExpression

        given = dict(self.columns)
        given.setdefault("cluster_id", given["case_id"])  # the log schema's default: every case its own cluster
        exprs = [
            ConstantExpression(analysis).cast("VARCHAR").alias("analysis"),
            ColumnExpression("_autheval_row").alias("row_index"),
        ]
        for column in LOG_COLUMNS:
            if column in given:
                exprs.append(ColumnExpression('"' + given[column].replace('"', '""') + '"').alias(column))
            else:
                exprs.append(ConstantExpression(None).cast("VARCHAR").alias(column))
        return con.table(view).select(*exprs)


def scan_parquet_files(con, view: str, files: Sequence[str]) -> None:
    """Create the temporary view `view` on `con` over Parquet `files` (paths or URIs DuckDB reads,
    such as a lake table's), every column beside `_autheval_row`, read where they lie, streaming
    (sql/records/records_dataset_parquet.sql): the rows are never held in this process."""
    con.execute(
        fill("records/records_dataset_parquet", identifiers={"view": view}, fragments={"files": path_list(files)})
    )


@dataclass(frozen=True)
class StoredFiles:
    """Parquet files of a store as DuckDB reads them where they lie: local paths, or an object store's
    paths through the lake's filesystem seam (`register` lets the connection read them)."""

    files: tuple[str, ...]
    filesystem: object = field(default=None, compare=False)  # an object store's pyarrow filesystem
    protocol: str | None = None  # the fsspec protocol DuckDB reads `files` through (object stores)
    rows: int | None = None  # their rows in all, where their footers were read

    def __len__(self) -> int:
        return len(self.files)

    def register(self, con) -> None:
        if self.protocol is not None:
            _register_filesystem(con, self.protocol, self.filesystem)


def stored_files(location, paths: Sequence[str]) -> StoredFiles:
    """The StoredFiles of store `paths` at a LakeLocation (warehouse.filesystem)."""
    if location.is_local:
        return StoredFiles(tuple(paths))
    protocol = f"{FSSPEC_PREFIX}{location.scheme}"
    return StoredFiles(tuple(f"{protocol}://{p}" for p in paths), location.filesystem, protocol)


def path_list(files: Sequence[str]) -> str:
    return "[" + ", ".join(quote_literal(f) for f in files) + "]"


def _register_filesystem(con, protocol: str, filesystem) -> None:
    """Let DuckDB read `protocol://` paths through a pyarrow filesystem (the lake's seam), by fsspec."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    if protocol in con.list_filesystems():
        return
    prefix = f"{protocol}://"

    def strip_protocol(cls, path):
        # the store's own path, bucket and all: fsspec's default takes `bucket` for a host and drops it
        if isinstance(path, (list, tuple)):
            return [strip_protocol(cls, p) for p in path]
        path = str(path)
        return path[len(prefix) :] if path.startswith(prefix) else path

    seam = type(
        "SeamFileSystem", (ArrowFSWrapper,), {"protocol": (protocol,), "_strip_protocol": classmethod(strip_protocol)}
    )
    con.register_filesystem(seam(filesystem))


def open_dataset(
    source: str | Path, used: tuple[str, ...] = ()
) -> tuple[RecordDataset, tuple[str, ...], Callable[[], str]]:
    """(the RecordDataset of a record path or URI, its unused columns, a function giving its data
    hash). Its header is checked (column_mapping) on the file schemas alone: every Parquet file's
    footer must give the first file's columns and types; no row is read."""
    text = str(source)
    if not is_dataset_path(text):
        path = Path(text)
        if not path.is_file():
            raise RecordError(text, None, missing_file_rule(path))
        if path.name.lower().endswith(CSV_SUFFIXES):
            return _csv_dataset(path, used)
        if not _is_parquet(path.name):
            raise RecordError(text, None, "unknown file type: expected .csv, .csv.gz, .tsv, .parquet or .pq")
    location, paths, names = dataset_files(text)
    if paths[0].lower().endswith(CSV_SUFFIXES):  # a local folder (or glob) of CSV files only
        return _csv_files_dataset(text, [Path(p) for p in paths], used, lambda: dataset_sha256(location, paths))
    first, first_name, n_rows = None, None, 0
    for path, name in zip(paths, names):
        label = text if len(paths) == 1 else name
        try:
            with location.filesystem.open_input_file(path) as handle:
                _check_footer(handle, label)
                with pq.ParquetFile(handle) as parquet:
                    if parquet.metadata.num_columns > MAX_COLUMNS:
                        raise RecordError(
                            label,
                            None,
                            f"has {parquet.metadata.num_columns:,} columns; a record has at most {MAX_COLUMNS:,}",
                        )
                    schema, rows = _plain_schema(parquet.schema_arrow), parquet.metadata.num_rows
        except (pa.ArrowInvalid, OSError) as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RecordError(label, None, f"cannot be read as Parquet: {message}") from err
        if first is None:
            first, first_name = schema, name
            kind, mapping, unused = column_mapping(schema.empty_table(), label, used)
        elif schema != first:
            column, rule = _schema_difference(first, schema)
            raise RecordError(
                name,
                column,
                f"has other columns or types than {first_name}: {rule} (every file of a dataset has the same "
                "columns, of the same types, in the same order)",
            )
        n_rows += rows
    stored = stored_files(location, paths)
    dataset = RecordDataset(
        text,
        "parquet",
        kind,
        stored.files,
        tuple(names),
        tuple(mapping.items()),
        n_rows,
        filesystem=stored.filesystem,
        protocol=stored.protocol,
    )
    return dataset, unused, lambda: dataset_sha256(location, paths)


def _csv_dataset(path: Path, used=()) -> tuple[RecordDataset, tuple[str, ...], Callable[[], str]]:
    """A CSV file as a dataset of one file: its header read here (names stripped, checked), its rows
    scanned by DuckDB, every cell as text (so a bad value can be named, not coerced)."""
    source = str(path)
    if path.stat().st_size == 0:
        raise RecordError(source, None, "file is empty")
    check_readable_name(source)
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    header = csv_header(path, delimiter)
    _check_delimiter(path, delimiter)
    kind, mapping, unused = column_mapping(_header_table(header), source, used)
    position = {name: i for i, name in enumerate(header)}
    columns = tuple((dst, f"c{position[src]}") for dst, src in mapping.items())
    dataset = RecordDataset(
        source, "csv", kind, (str(path),), (source,), columns, width=len(header), delimiter=delimiter
    )
    return dataset, unused, lambda: file_sha256(path)


def _csv_files_dataset(
    source: str, paths: list[Path], used, sha256: Callable[[], str]
) -> tuple[RecordDataset, tuple[str, ...], Callable[[], str]]:
    """CSV files read as one dataset in name order: every file's header is the first file's (the same
    columns in the same order; the delimiter of each file's suffix), each file scanned as a CSV file is
    and its rows numbered (file number << ROW_BITS) + the row within it, as a Parquet dataset's."""
    header = None
    for path in paths:
        name = str(path)
        if path.stat().st_size == 0:
            raise RecordError(name, None, "file is empty")
        delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
        this = csv_header(path, delimiter)
        _check_delimiter(path, delimiter)
        if header is None:
            header, first = this, name
            kind, mapping, unused = column_mapping(_header_table(header), name, used)
        elif this != header:
            column = next((b for a, b in zip(header, this) if a != b), (this + header)[min(len(this), len(header))])
            raise RecordError(
                name,
                column,
                f"has other columns than {first} (every file of a CSV dataset has the same header, the "
                "columns in the same order)",
            )
    assert header is not None  # dataset_files gives at least one file
    position = {name: i for i, name in enumerate(header)}
    columns = tuple((dst, f"c{position[src]}") for dst, src in mapping.items())
    names = tuple(str(p) for p in paths)
    dataset = RecordDataset(source, "csv", kind, names, names, columns, width=len(header))
    return dataset, unused, sha256


def _check_footer(handle, source: str) -> None:
    """Refuse a Parquet footer larger than MAX_FOOTER_BYTES (a file of a million columns) before it is parsed."""
    size = handle.size()
    if size < 12:
        return  # too short to be Parquet: the reader says so
    handle.seek(size - 8)
    tail = handle.read(8)
    handle.seek(0)
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] == b"PAR1" and footer > MAX_FOOTER_BYTES:
        raise RecordError(
            source, None, f"its Parquet footer is {footer:,} bytes (at most {MAX_FOOTER_BYTES:,}): too many columns"
        )


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    """A file's Arrow schema as a dataset compares it: without metadata, every column nullable (whether
    a writer declared a column non-null changes no value the reader sees)."""
    return pa.schema([field.with_nullable(True).remove_metadata() for field in schema]).remove_metadata()


def _header_table(header: list[str]) -> pa.Table:
    """An empty table with the header's names (duplicates kept, so header_names can name them)."""
    return pa.Table.from_arrays([pa.array([], pa.string()) for _ in header], names=list(header))


def _schema_difference(first: pa.Schema, other: pa.Schema) -> tuple[str | None, str]:
    """(the first column where two files' schemas differ, how): a column missing, another type, another order."""
    for name in [*first.names, *other.names]:
        a = first.field(name).type if first.get_field_index(name) >= 0 else None
        b = other.field(name).type if other.get_field_index(name) >= 0 else None
        if a is None or b is None:
            return name, "the column is missing here" if b is None else "the column is not in the first file"
        if a != b:
            return name, f"{b} here, {a} there"
    for a, b in zip(first.names, other.names):
        if a != b:
            return b, "the columns are in another order"
    return None, "the schemas differ"


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
