"""The decision record: what the monitor decided about each look, as it was decided, kept for good.

The `monitor` table is recomputed from every landed log on every run, so a look's status can change
after it was first decided: a late file or a declared correction changes the look's data, a new
protocol its rules. A review board needs both: what was decided at the time, and what the data say
now. `monitor_decisions` is append-only: each run adds one row for every look (site, model version,
mechanism, rule (metric, unit), period) that has no row yet, stamped with the lake run that decided it
and the snapshot whose landed data it read, the protocol's and the data's SHA-256; a row once written
is never rewritten or removed. The served `monitor` table carries, on each row, the look's first
decision beside its current status and a `decision` column saying why they differ
(sql/recurring/decisions_view.sql: decided_now, as_decided, superseded_by_later_data,
superseded_by_protocol, recomputed).

Core functions only (no Dagster): the `monitor` asset calls record_decisions."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from autheval.columns import schema
from warehouse.sql import connect, run

DECISIONS_TABLE = "monitor_decisions"
DECISIONS_SCHEMA = schema(
    "site model_version mechanism metric unit period look status reason n_clusters estimate cs_lower cs_upper",
    "lower upper alpha_adjusted protocol_version protocol_sha256 data_sha256",
    ("decided_run", pa.string()),
    ("decided_snapshot", pa.int64()),
)
# the columns the served monitor table gains: its look's first decision, and how the status stands to it
VIEW_COLUMNS = (
    ("decided_status", pa.string()),
    ("decided_run", pa.string()),
    ("decided_snapshot", pa.int64()),
    ("decision", pa.string()),
)
# a run's history, not a function of the landed data: left out where a receipt hashes the monitor table
HISTORY_COLUMNS = tuple(name for name, _ in VIEW_COLUMNS)
DECISIONS = ("decided_now", "as_decided", "superseded_by_later_data", "superseded_by_protocol", "recomputed")


def empty_decisions() -> pa.Table:
    return DECISIONS_SCHEMA.empty_table()


@dataclass(frozen=True)
class Decided:
    """The decision record after this run (the earlier rows first, unchanged; then this run's new
    rows), how many rows are new, and the monitor table as served (its rows and order, with
    VIEW_COLUMNS)."""

    record: pa.Table
    new_rows: int
    monitor: pa.Table


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` in `target`'s columns (a column it lacks is null), each cast to its type."""
    n = table.num_rows
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type) for f in target
    ]
    return pa.Table.from_arrays(columns, schema=target)


def record_decisions(before: pa.Table | None, monitor: pa.Table, run_id: str, snapshot: int | None) -> Decided:
    """Add this run's first decisions to the record `before` (None: no record yet) and annotate
    `monitor` (this run's monitor table) with each look's first decision. `run_id`: the lake run that
    decides; `snapshot`: the committed snapshot whose landed data it read. Earlier rows are returned as
    they were: the record only grows."""
    before = empty_decisions() if before is None else before
    con = connect()
    con.register("decisions_before", _conform(before, DECISIONS_SCHEMA))
    con.register("monitor_now", monitor)
    params = {"run_id": run_id, "snapshot": snapshot}
    new = _conform(run(con, "recurring/decisions_new", params), DECISIONS_SCHEMA)
    # the earlier rows keep their own columns (a record written before a column existed keeps it null)
    record = pa.concat_tables([_conform(before, DECISIONS_SCHEMA), new])
    con.register("decisions", record)
    con.register("monitor_now", monitor.append_column("row_index", pa.array(range(monitor.num_rows), pa.int64())))
    view = run(con, "recurring/decisions_view", params)
    served = pa.schema([*monitor.schema, *(pa.field(name, kind) for name, kind in VIEW_COLUMNS)])
    return Decided(record, new.num_rows, _conform(view, served))


def without_history(table: pa.Table) -> pa.Table:
    """The monitor table without the columns that record a run's history (HISTORY_COLUMNS): what the
    landed data and the protocol alone determine, as a receipt hashes it."""
    return table.drop_columns([c for c in HISTORY_COLUMNS if c in table.column_names])
