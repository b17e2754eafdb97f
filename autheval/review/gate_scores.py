"""Gate scores a source gives per image (a CSV or Parquet file with image_id and s_gate): used as given
instead of fitting the gate proxy, after the same kind of validation as every other input."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from autheval.errors import RecordError, first_violation
from autheval.io import read_table
from warehouse.sql import connect, load_sql


def read_gate_scores(path: str | Path, gate_inputs: pa.Table) -> pa.Table:
    """image_id, split, s_gate, gate_proxy='given', proxy_source=<path> for every image of
    `gate_inputs` (image_id, split). RecordError (one line) on an unknown id, a duplicate or a
    non-finite score."""
    source = str(path)
    table = read_table(path)
    table = table.rename_columns([n.strip() for n in table.column_names])
    for column in ("image_id", "s_gate"):
        if column not in table.column_names:
            raise RecordError(source, column, "required column is missing (a gate-score file has image_id, s_gate)")
    con = connect()
    con.register(
        "raw_gate_scores",
        pa.table(
            {
                "row_index": pa.array(range(table.num_rows), pa.int64()),
                "image_id": table.column("image_id").cast(pa.string()),
                "s_gate": table.column("s_gate").cast(pa.string()),
            }
        ),
    )
    con.register("gate_inputs", gate_inputs.select(["image_id", "split"]))
    violation = con.execute(load_sql("context/gate_scores_validate")).fetchone()
    if violation:
        raise first_violation(source, violation, "image")
    return con.execute(load_sql("context/gate_scores_given"), {"path": source}).arrow().read_all()
