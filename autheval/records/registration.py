"""Registering records on a DuckDB connection: `register_records` makes a RecordSet's canonical rows a view.

Its own module, below the readers and the per-cluster statistics (autheval/records/cluster_stats.py),
which both register records: held rows are registered as they are, a dataset's as a view that scans its
files where they lie (sql/records/records_dataset_canonical.sql), so no row is held in this process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from warehouse.sql import fill, load_sql

if TYPE_CHECKING:
    from autheval.records.schema import RecordSet


def canonical_sql(raw: str | None = None) -> str:
    """The canonical record's SELECT: of the dataset view `raw` (records_dataset_canonical, scanned
    where it lies), else the typed part of `raw_records` held in memory (records_normalize); both fill
    one text of the typed columns (records_typed_columns)."""
    typed = {"typed": load_sql("records/records_typed_columns")}
    if raw is None:
        return fill("records/records_normalize", fragments=typed)
    return fill("records/records_dataset_canonical", identifiers={"raw": raw}, fragments=typed)


def register_records(con, recordsets: Sequence[RecordSet], name: str = "records") -> None:
    """Make the canonical rows of `recordsets` readable as `name` on `con`: held rows registered as
    they are; a dataset's as a view that scans its files (sql/records/records_dataset_canonical.sql over
    the dataset's columns), so no row is held in this process."""
    if all(r.rows is not None for r in recordsets):
        con.register(name, pa.concat_tables([r.rows for r in recordsets]))
        return
    relations = []
    for i, records in enumerate(recordsets):
        if records.rows is not None:
            held = f"record_rows_{i}"
            con.register(held, records.rows)
            relations.append(con.sql(fill("records/records_held_canonical", identifiers={"rows": held})))
            continue
        files, raw = f"record_files_{i}", f"record_raw_{i}"
        assert records.dataset is not None  # a record holds its rows or names its files
        records.dataset.scan(con, files)
        records.dataset.raw_records(con, files, records.analysis).create_view(raw)
        relations.append(con.sql(canonical_sql(raw)))
    union = relations[0]
    for other in relations[1:]:
        union = union.union(other)
    union.create_view(name)
