"""The estimators on another engine (Spark, or DuckDB through Ibis), in the portable SQL subset.

`autheval.estimation.estimators.estimate(..., engine=...)` hands this module the work that grows with records and
replicates: the per-cluster sums (`portable_cluster_stats`), the replicate sums (the `reference`
scheme's exact numpy stream joined in as a replicate-weights table, `portable_replicates_weighted`;
the `poisson` scheme's weights hashed inside the query, `portable_replicates_poisson`; the `evaluator`
scheme's per-metric streams joined in one by one, `portable_evaluator_weighted`) and the metrics per
replicate (`replicate_metrics`; the evaluator's from its sums, on the in-process DuckDB). What comes
back is small (one row per cluster, and one row per replicate, analysis and unit); the in-process
DuckDB then takes the quantiles, the Delta = p * delta check and the paired contrasts with the same
SQL files as the default engine, so every engine reports through one code path.

The one engine-specific step is numpy's stream: it is counted here by the in-process path's own code
(`autheval.estimation.bootstrap.stream_counts`), in replicate blocks (bounded memory), and shipped as sparse
weights (n_clusters, rep, cluster_rank, mult), mult > 0 only.

The point estimates (rep -1) are one query for every scheme (`portable_replicates_weighted` with
weight 1 on every cluster), so a scheme changes intervals only, on this path too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from autheval.estimation.bootstrap import stream_counts
from autheval.vocabulary import SCHEMES
from warehouse.engine import Engine, EngineError

WEIGHT_BLOCK_VALUES = 1 << 23  # drawn cluster indices per weights block (about 5M weight rows)
POISSON_BLOCK_REPS = 1 << 16  # replicate ids per poisson query (bounds its GROUP BY)
POINT_REP = -1  # the point estimate: every cluster once, in the replicate layout


def check_engine_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise EngineError(
            f"--scheme {scheme}: runs on the duckdb engine only; with --engine spark use {' or '.join(SCHEMES)}"
        )


def reference_weight_blocks(seed: int, n_clusters: int, reps: int, block_values: int = WEIGHT_BLOCK_VALUES):
    """Yield Arrow tables (n_clusters, rep, cluster_rank, mult): the multiplicity of every cluster rank
    drawn in each replicate of numpy's `default_rng(seed).integers(0, G, size=G)` stream (AuthEval's
    reference bootstrap; drawing several replicates at once gives the identical stream), mult > 0 only.
    The point is not among them (`point_weights`)."""
    g = int(n_clusters)
    rows_per_block = max(1, min(reps, block_values // g))
    starts = range(0, reps, rows_per_block)
    sizes = [min(rows_per_block, reps - start) for start in starts]
    for start, counts in zip(starts, stream_counts(seed, g, sizes)):
        flat = np.flatnonzero(counts)
        rep = (flat // g + start).astype(np.int64)
        rank = (flat % g).astype(np.int32)
        mult = counts.ravel()[flat]
        yield pa.table(
            {"n_clusters": pa.array(np.full(len(rep), g, np.int32)), "rep": rep, "cluster_rank": rank, "mult": mult}
        )


def point_weights(cluster_counts) -> pa.Table:
    """replicate_weights of the point (rep -1): weight 1 on every cluster rank of every cluster count."""
    sizes = [int(g) for g in cluster_counts]
    return pa.table(
        {
            "n_clusters": pa.array(np.repeat(np.array(sizes, np.int32), sizes)),
            "rep": pa.array(np.full(sum(sizes), POINT_REP, np.int64)),
            "cluster_rank": pa.array(
                np.concatenate([np.arange(g, dtype=np.int32) for g in sizes] or [np.array([], np.int32)])
            ),
            "mult": pa.array(np.ones(sum(sizes))),
        }
    )


def replicate_id_blocks(reps: int, block_reps: int = POISSON_BLOCK_REPS):
    """Yield Arrow tables replicate_ids(rep): every replicate (0 ..), in blocks."""
    for first in range(0, reps, block_reps):
        yield pa.table({"rep": np.arange(first, min(first + block_reps, reps), dtype=np.int64)})


def records_on_engine(engine: Engine, con, recordsets=()) -> None:
    """Make the canonical `records` of `recordsets` readable on `engine`. Parquet datasets are read
    by the engine itself from their files (its own reader, where they lie: nothing passes through
    this process) and canonicalised there (records/records_dataset_canonical.sql, portable); anything else
    (held rows, a CSV file) is shipped from the `records` registered on the local DuckDB `con`."""
    if not recordsets or not all(r.dataset is not None and r.dataset.kind == "parquet" for r in recordsets):
        engine.register("records", _arrow(con.table("records").arrow()))
        return
    from autheval.records.registration import canonical_sql
    from autheval.records.schema import LOG_COLUMNS

    statements = []
    for i, records in enumerate(recordsets):
        files, raw = f"record_files_{i}", f"record_raw_{i}"
        engine.register_files(files, list(records.dataset.names))
        given = dict(records.dataset.columns)
        given.setdefault("cluster_id", given["case_id"])  # the log schema's default: every case its own cluster
        # row_index is the rule check's (done here, by DuckDB): the engine's records carry none
        engine.create_column_view(
            raw, files, {c: given.get(c) for c in LOG_COLUMNS}, {"analysis": records.analysis, "row_index": ""}
        )
        statements.append(canonical_sql(raw))
    engine.create_union_view("records", statements)


def replicate_metrics_on_engine(
    engine: Engine, con, scheme: str, reps: int, seed: int, recordsets=(), stats_back: bool = True
) -> None:
    """Compute cluster_stats and replicate_metrics on `engine` from the records (`records_on_engine`:
    Parquet datasets read by the engine, else the `records` registered on the local DuckDB `con`),
    and leave replicate_metrics (and, with `stats_back`, cluster_stats: the paired contrasts' cluster
    check needs it) as tables on `con`, for intervals, identity_check and paired_contrast there.
    Without `stats_back` only one row per replicate, analysis and unit comes back."""
    check_engine_scheme(scheme)
    records_on_engine(engine, con, recordsets)
    engine.create("cluster_stats", "records/portable_cluster_stats")
    if stats_back:
        stats = engine.table("cluster_stats").sort_by([("analysis", "ascending"), ("cluster_rank", "ascending")])
        con.from_arrow(stats).create("cluster_stats")
    sizes = sorted(int(g) for g in engine.read("records/portable_cluster_counts").column("n_clusters").to_pylist())
    engine.register("replicate_weights", point_weights(sizes))  # the point: the same query for every scheme
    engine.create("replicate_sums", "estimates/portable_replicates_weighted")
    parts = [engine.read("estimates/replicate_metrics")]
    if scheme == "evaluator":
        parts.append(_evaluator_metrics_on_engine(engine, con, reps, seed))
    elif scheme == "reference":
        for g in sizes:
            for weights in reference_weight_blocks(seed, g, reps):
                engine.register("replicate_weights", weights)
                engine.create("replicate_sums", "estimates/portable_replicates_weighted")
                parts.append(engine.read("estimates/replicate_metrics"))
    else:
        for ids in replicate_id_blocks(reps):
            engine.register("replicate_ids", ids)
            engine.create("replicate_sums", "estimates/portable_replicates_poisson", {"seed": seed})
            parts.append(engine.read("estimates/replicate_metrics"))
    metrics = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    con.from_arrow(metrics).create("replicate_metrics")


def _evaluator_metrics_on_engine(engine: Engine, con, reps: int, seed: int) -> pa.Table:
    """The `evaluator` scheme's replicates: each metric's own stream (seed + offset) over its own
    clusters, shipped as weights stream by stream; the replicate sums (one row per analysis, metric and
    replicate) come back into `con` as evaluator_sums, and estimates/evaluator_metrics.sql makes their
    replicate_metrics rows there."""
    from warehouse.sql import load_sql

    engine.create("evaluator_clusters", "estimates/portable_evaluator_clusters")
    parts = []
    for stream in engine.read("estimates/portable_evaluator_streams").to_pylist():
        offset, g = int(stream["seed_offset"]), int(stream["n_clusters"])
        for weights in reference_weight_blocks(seed + offset, g, reps):
            weights = weights.append_column("seed_offset", pa.array(np.full(weights.num_rows, offset, np.int32)))
            engine.register("replicate_weights", weights)
            parts.append(engine.read("estimates/portable_evaluator_weighted"))
    sums = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    con.from_arrow(sums).create("evaluator_sums")
    return _arrow(con.execute(load_sql("estimates/evaluator_metrics")).arrow())


def _arrow(obj) -> pa.Table:
    """DuckDB's `.arrow()` gives a table or a batch reader, depending on the version."""
    return obj.read_all() if hasattr(obj, "read_all") else obj
