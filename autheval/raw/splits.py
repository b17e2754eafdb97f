"""Train/val/test splits by whole clusters: a frozen split when one exists (validated as in AuthEval
spec 1.11), else AuthEval's stratified split algorithm (spec 1.10), and a check that no cluster
crosses a split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autheval.errors import RecordError
from warehouse.sql import connect, load_sql

SPLITS = ("train", "val", "test")
SPLIT_SEED = 20260706
RATIOS = (0.70, 0.15)  # train, val; test takes the rest
FREEZE_COLUMNS = ("image_id", "lesion_id", "cluster_id", "split")


def split_sizes(n: int, ratios=RATIOS) -> tuple[int, int, int]:
    """(train, val, test) cluster counts: Python float products, rounded half to even."""
    n_train = int(round(n * ratios[0]))
    n_val = int(round(n * ratios[1]))
    return n_train, n_val, n - n_train - n_val


def cluster_signatures(clusters: pa.Table, images: pa.Table) -> pa.Table:
    """cluster_id, signature '{risk_stratum}|{site_profile}' (first non-null in manifest order)."""
    columns = {"image_id": images.column("image_id")}
    for name in ("risk_stratum", "site_profile"):
        columns[name] = images.column(name) if name in images.column_names else pa.nulls(images.num_rows, pa.string())
    columns["row_index"] = (
        images.column("row_index")
        if "row_index" in images.column_names
        else pa.array(np.arange(images.num_rows, dtype=np.int64))
    )
    con = connect()
    con.register("image_columns", pa.table(columns))
    con.register("image_clusters", clusters.select(["image_id", "cluster_id"]))
    return con.execute(load_sql("duplicates/raw_cluster_signatures")).arrow().read_all()


def assign_splits(clusters: pa.Table, images: pa.Table, seed: int = SPLIT_SEED, ratios=RATIOS) -> pa.Table:
    """AuthEval's split (spec 1.10): one default_rng(seed); signatures in ascending order; within each,
    cluster ids ascending, shuffled in place, then the first round(n*0.70) to train, the next
    round(n*0.15) to val, the rest to test. Returns image_id, cluster_id, split."""
    signatures = cluster_signatures(clusters, images)
    rng = np.random.default_rng(seed)
    split_of: dict[str, str] = {}
    by_signature: dict[str, list[str]] = {}
    for cluster_id, signature in zip(
        signatures.column("cluster_id").to_pylist(), signatures.column("signature").to_pylist()
    ):
        by_signature.setdefault(signature, []).append(cluster_id)
    for signature in sorted(by_signature):
        ids = np.array(sorted(by_signature[signature]), dtype=object)
        rng.shuffle(ids)
        n_train, n_val, _ = split_sizes(len(ids), ratios)
        for i, cluster_id in enumerate(ids):
            split_of[cluster_id] = "train" if i < n_train else "val" if i < n_train + n_val else "test"
    cluster_ids = clusters.column("cluster_id").to_pylist()
    return pa.table(
        {
            "image_id": clusters.column("image_id"),
            "cluster_id": clusters.column("cluster_id"),
            "split": pa.array([split_of[c] for c in cluster_ids], pa.string()),
        }
    )


def crossing_clusters(table: pa.Table) -> pa.Table:
    """Clusters whose images are in more than one split (image_id, cluster_id, split in; none expected)."""
    con = connect()
    con.register("cluster_splits", table.select(["image_id", "cluster_id", "split"]))
    return con.execute(load_sql("duplicates/raw_split_crossing")).arrow().read_all()


def check_no_cluster_crosses_split(table: pa.Table, source: str = "splits") -> None:
    crossing = crossing_clusters(table)
    if crossing.num_rows:
        first = crossing.slice(0, 1).to_pylist()[0]
        raise RecordError(
            source,
            "split",
            "a cluster spans more than one split",
            f"{first['cluster_id']} in {first['splits']}; {crossing.num_rows} clusters in all",
        )


def read_freeze(path: str | Path) -> pa.Table:
    """A split_freeze file (CSV or Parquet) as text columns."""
    from autheval.raw.ingest import read_csv

    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        if not path.is_file():
            raise RecordError(str(path), None, "file not found")
        table = pq.read_table(path)
        return table.cast(pa.schema([(f.name, pa.string()) for f in table.schema]))
    return read_csv(path, connect())


def validate_freeze(freeze: pa.Table, computed: pa.Table, source: str = "split_freeze") -> pa.Table:
    """Check a frozen split against recomputed clusters (spec 1.11) and return image_id, cluster_id,
    split. Raises RecordError naming the first broken rule: required columns, unique ids, split
    values, the image set equal to the ingested one, every cluster id equal to the recomputed one,
    no cluster spanning two splits."""
    for column in ("image_id", "cluster_id", "split"):
        if column not in freeze.column_names:
            raise RecordError(source, column, "required column is missing", f"expected {', '.join(FREEZE_COLUMNS)}")
    con = connect()
    con.register(
        "frozen_split",
        pa.table(
            {
                "row_index": pa.array(np.arange(freeze.num_rows, dtype=np.int64)),
                "image_id": freeze.column("image_id").cast(pa.string()),
                "cluster_id": freeze.column("cluster_id").cast(pa.string()),
                "split": freeze.column("split").cast(pa.string()),
            }
        ),
    )
    con.register("computed", computed.select(["image_id", "cluster_id"]))
    violations = con.execute(load_sql("ingest/raw_freeze_checks")).fetchall()
    if violations:
        _, column, rule, row_index, image_id, value, n_rows = violations[0]
        example = f"data row {row_index + 1}" if row_index is not None else ""
        if image_id is not None:
            example += (", " if example else "") + f"id {image_id!r}"
        if value is not None and value != image_id:
            example += f", value {value!r}"
        if n_rows > 1:
            example += f"; {n_rows} rows in all"
        raise RecordError(source, column, rule, example)
    table = pa.table(
        {
            "image_id": freeze.column("image_id").cast(pa.string()),
            "cluster_id": freeze.column("cluster_id").cast(pa.string()),
            "split": freeze.column("split").cast(pa.string()),
        }
    )
    return table.sort_by("image_id")
