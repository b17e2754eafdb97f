"""The opt-in per-cluster export (`site export --per-cluster --salt-file F`), and the hub's exact schemes.

Weaker disclosure protection than the default export, by design: the hub receives one row per lesion
cluster (docs/sites.md). A site that opts in adds two files to its export, for every analysis that is not
suppressed (the same minimum counts):

* `clusters.parquet`: per cluster its sums (sql/records/cluster_stats.sql's columns: cases, changed
  cases, the score sums), in the site's rank order (ascending cluster id), the cluster named by
  HMAC-SHA256 of its id under a salt the site holds (never the id itself);
* `evaluator_clusters.parquet`: the evaluator scheme's per-metric cluster terms
  (sql/estimates/evaluator_clusters.sql), by rank within each metric's stream, with no id at all.

The hub lays the sites' clusters one after another in the order `evaluate` ranks ids `<site>:<id>` in
(sites by the bytes of `<site>:`, then each site's rank order) and runs the `reference` scheme (numpy's
stream over the clusters, estimates/replicates_point.sql's point) or the `evaluator` scheme (a stream per
metric) on them, with the functions and SQL `evaluate` uses: its intervals are `evaluate`'s of all the
sites' records with ids `<site>:<id>`, to the bit. What the hub learns beyond the default export: every
cluster's sums, the order of the site's raw ids, and the salted hashes, which let it follow a cluster
from one export to the next made with the same salt (a fresh salt per export prevents that).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

import numpy as np
import pyarrow as pa

from autheval.columns import schema, typed
from autheval.errors import RecordError

CLUSTERS = "clusters.parquet"
EVALUATOR_CLUSTERS = "evaluator_clusters.parquet"
CLUSTER_FILES = (CLUSTERS, EVALUATOR_CLUSTERS)
EXACT_SCHEMES = ("reference", "evaluator")
MIN_SALT_BYTES = 16
SUMS = ("n", "sum_changed", "sum_exec", "sum_prop", "sum_gap", "sum_glob", "sum_total_gap", "sum_utility_gap")
CLUSTERS_SCHEMA = schema("analysis", ("cluster", pa.string()), *typed(pa.float64(), SUMS))
EVALUATOR_SCHEMA = schema(
    "analysis metric", *typed(pa.int32(), "seed_offset n_clusters cluster_rank"), *typed(pa.float64(), "s n m k")
)


def read_salt(path: Path, flag: str = "--salt-file") -> bytes:
    """The site's salt: a plain file (not a link) of at least MIN_SALT_BYTES bytes that only its owner
    may read (as site.key): whoever holds it can test a guessed cluster id against the hashes."""
    from autheval.sites.signing import plain_file_bytes

    data = plain_file_bytes(Path(path), flag, "salt file", 1 << 16)
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode & 0o077:
        raise RecordError(flag, None, f"{path} may be read by others (mode {mode:04o}); chmod 600 {path}")
    if len(data.strip()) < MIN_SALT_BYTES:
        raise RecordError(
            flag,
            None,
            f"{path} holds {len(data.strip())} bytes; a salt is at least {MIN_SALT_BYTES} random bytes "
            "(head -c 32 /dev/urandom > salt)",
        )
    return data


def cluster_hash(salt: bytes, cluster_id: str) -> str:
    """HMAC-SHA256 of a cluster id under the site's salt, as hex."""
    return hmac.new(salt, cluster_id.encode("utf-8"), hashlib.sha256).hexdigest()


def cluster_tables(recordsets, exported: set[str], salt: bytes) -> tuple[pa.Table, pa.Table]:
    """(clusters.parquet, evaluator_clusters.parquet) of the analyses in `exported`: the per-cluster sums
    with salted ids, rank order; the evaluator's per-metric terms, by rank."""
    from autheval.records.cluster_stats import register_cluster_stats
    from autheval.records.registration import register_records
    from warehouse import sql

    kept = [r for r in recordsets if r.analysis in exported]
    if not kept:
        return CLUSTERS_SCHEMA.empty_table(), EVALUATOR_SCHEMA.empty_table()
    con = sql.connect(threads=1)
    try:
        register_records(con, kept)
        register_cluster_stats(con, kept)
        stats = sql.run(con, "sites/site_clusters")
        terms = sql.run(con, "estimates/evaluator_clusters")
    finally:
        con.close()
    ids = [cluster_hash(salt, str(c)) for c in stats.column("cluster_id").to_pylist()]
    clusters = pa.table(
        {"analysis": stats.column("analysis").cast(pa.string()), "cluster": pa.array(ids, pa.string())}
        | {c: stats.column(c).cast(pa.float64()) for c in SUMS}
    )
    return clusters.cast(CLUSTERS_SCHEMA), terms.select(EVALUATOR_SCHEMA.names).cast(EVALUATOR_SCHEMA)


# --- the hub ---------------------------------------------------------------------------------------------


def site_order(site: str) -> bytes:
    """Where `evaluate` ranks a site's clusters among all sites': by the bytes of their id prefix `<site>:`."""
    return f"{site}:".encode()


def read_cluster_tables(blobs: dict[str, bytes], folder: Path, analyses: dict, flag: str) -> dict:
    """{analysis: (clusters table, evaluator terms table)} of a signed per-cluster export, each checked
    against the analysis's statistics: its columns and types, one row per cluster (distinct 64-hex
    hashes, cases adding up to the analysis's), the evaluator's rows per metric and rank."""
    import io

    import pyarrow.parquet as pq

    tables = {}
    for name, wanted in ((CLUSTERS, CLUSTERS_SCHEMA), (EVALUATOR_CLUSTERS, EVALUATOR_SCHEMA)):
        source = str(folder / name)
        try:
            table = pq.read_table(io.BytesIO(blobs[name]))
        except Exception as err:  # pyarrow's errors vary by what is wrong with the file
            raise RecordError(flag, None, f"{source} is not a Parquet file: {err}") from err
        if table.schema.remove_metadata() != wanted:
            raise RecordError(source, None, f"must hold the columns {', '.join(wanted.names)} of their types, in order")
        tables[name] = table
    out = {}
    clusters, terms = tables[CLUSTERS], tables[EVALUATOR_CLUSTERS]
    names = clusters.column("analysis").to_pylist()
    term_names = terms.column("analysis").to_pylist()
    exported = {a for a, e in analyses.items() if not e["suppressed"]}
    if set(names) != exported or set(term_names) - exported:
        raise RecordError(str(folder / CLUSTERS), "analysis", "must hold every analysis not suppressed, no other")
    for analysis in sorted(exported):
        entry = analyses[analysis]
        rows = clusters.filter(pa.array([n == analysis for n in names]))
        ids = rows.column("cluster").to_pylist()
        source = str(folder / CLUSTERS)
        if len(ids) != entry["n_clusters"] or len(set(ids)) != len(ids):
            raise RecordError(
                source, "cluster", f"analysis {analysis!r} must hold its {entry['n_clusters']:,} clusters once each"
            )
        if any(len(i) != 64 or not all(ch in "0123456789abcdef" for ch in i) for i in ids):
            raise RecordError(source, "cluster", "must be an HMAC-SHA256 (64 lower-case hex digits)")
        n = rows.column("n").to_numpy(zero_copy_only=False)
        if not np.isfinite(n).all() or (n < 1).any() or n.sum() != entry["record"]["n_cases"]:
            raise RecordError(source, "n", f"analysis {analysis!r}: the clusters' cases must add up to its n_cases")
        part = terms.filter(pa.array([n == analysis for n in term_names]))
        g = entry["n_clusters"]
        changed = entry["n_changed_clusters"]
        for metric, count in _term_counts(part).items():
            want = changed if metric == "delta" else g
            if count != (want, want):
                raise RecordError(
                    str(folder / EVALUATOR_CLUSTERS),
                    "cluster_rank",
                    f"analysis {analysis!r} metric {metric!r} must rank its {want:,} clusters 0..{want - 1} once each",
                )
        out[analysis] = (rows, part)
    return out


def _term_counts(terms: pa.Table) -> dict[str, tuple[int, int]]:
    """metric -> (rows, distinct ranks below the declared count) of the evaluator terms of one analysis."""
    found: dict[str, set] = {}
    rows: dict[str, int] = {}
    for metric, rank, declared in zip(
        terms.column("metric").to_pylist(),
        terms.column("cluster_rank").to_pylist(),
        terms.column("n_clusters").to_pylist(),
    ):
        rows[metric] = rows.get(metric, 0) + 1
        if 0 <= rank < declared:
            found.setdefault(metric, set()).add(rank)
    return {m: (rows[m], len(found.get(m, ()))) for m in rows}


def exact_metrics_connection(analysis: str, exports, scheme: str, reps: int, seed: int):
    """A DuckDB connection holding replicate_metrics (estimates/replicate_metrics.sql's layout) of
    `analysis` pooled over the per-cluster `exports` under the exact `scheme`: the clusters laid out in
    `evaluate`'s order of ids `<site>:<id>` (cluster_stats), the point of estimates/replicates_point.sql,
    and the replicates of numpy's stream over them (reference: autheval.estimation.bootstrap
    replicate_products) or of one stream per metric (evaluator: stream_sums, then
    estimates/evaluator_metrics.sql), as `evaluate` forms them for one analysis."""
    from autheval.estimation.bootstrap import one_blas_thread, replicate_products, stream_sums
    from autheval.estimation.estimators import EVALUATOR_TO_SUMS, MATRIX_TO_SUMS
    from warehouse import sql

    ordered = sorted(exports, key=lambda e: site_order(e.site))
    stats = pa.concat_tables([e.clusters[analysis][0] for e in ordered])
    g = stats.num_rows
    ids = [f"{e.site}:{c}" for e in ordered for c in e.clusters[analysis][0].column("cluster").to_pylist()]
    cluster_stats = pa.table(
        {
            "analysis": pa.array([analysis] * g, pa.string()),
            "cluster_id": pa.array(ids, pa.string()),
            "cluster_rank": pa.array(np.arange(g, dtype=np.int32)),
            "n_clusters": pa.array(np.full(g, g, dtype=np.int32)),
            **{c: stats.column(c) for c in SUMS},
        }
    )
    con = sql.connect(threads=1)
    con.register("cluster_stats", cluster_stats)
    point = sql.run(con, "estimates/replicates_point")
    rep = pa.array(np.arange(reps, dtype=np.int64))
    if scheme == "reference":
        matrix_rows = sql.run(con, "records/cluster_matrix").sort_by("matrix_row")
        matrix = np.column_stack([matrix_rows.column(c).to_numpy(zero_copy_only=False) for c in MATRIX_TO_SUMS])
        with one_blas_thread():
            sums = replicate_products(seed, reps, matrix.astype(np.float64))
        block = {"analysis": pa.array([analysis] * reps, pa.string()), "rep": rep}
        block.update({name: pa.array(sums[:, j]) for j, name in enumerate(MATRIX_TO_SUMS.values())})
        con.register("replicate_sums", pa.concat_tables([point, pa.table(block).cast(point.schema)]))
        sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
        con.unregister("replicate_sums")
        return con
    con.register("replicate_sums", point)
    sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
    con.unregister("replicate_sums")
    streams = []
    for metric, offset in _metric_offsets(ordered, analysis):
        rows = pa.concat_tables(
            [
                t.filter(pa.array([m == metric for m in t.column("metric").to_pylist()]))
                for t in terms_of(ordered, analysis)
            ]
        )
        matrix = np.column_stack([rows.column(c).to_numpy(zero_copy_only=False) for c in EVALUATOR_TO_SUMS])
        streams.append((metric, seed + offset, matrix.astype(np.float64)))
    with one_blas_thread():
        sums_list = stream_sums([(s, m) for _, s, m in streams], reps)
    blocks = []
    for (metric, _, _), sums in zip(streams, sums_list):
        block = {"analysis": pa.array([analysis] * reps, pa.string()), "metric": pa.array([metric] * reps), "rep": rep}
        block.update({name: pa.array(sums[:, j]) for j, name in enumerate(EVALUATOR_TO_SUMS.values())})
        blocks.append(pa.table(block))
    con.register("evaluator_sums", pa.concat_tables(blocks))
    con.sql(sql.load_sql("estimates/evaluator_metrics")).insert_into("replicate_metrics")
    con.unregister("evaluator_sums")
    return con


def terms_of(exports, analysis: str) -> list[pa.Table]:
    return [e.clusters[analysis][1] for e in exports]


def _metric_offsets(exports, analysis: str) -> list[tuple[str, int]]:
    """(metric, seed offset) of the evaluator's streams, as the sites' terms name them (one offset each)."""
    found: dict[str, int] = {}
    for e in exports:
        terms = e.clusters[analysis][1]
        for metric, offset in zip(terms.column("metric").to_pylist(), terms.column("seed_offset").to_pylist()):
            if found.setdefault(metric, offset) != offset:
                raise RecordError("--export", None, f"{e.folder}: metric {metric!r} has another seed offset")
    return sorted(found.items(), key=lambda item: item[1])
