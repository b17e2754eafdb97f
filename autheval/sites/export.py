"""A site's export: the sufficient statistics of its records, never a case, a cluster id or a per-cluster row.

Per analysis (the record's name) the export holds:

* the totals every point estimate reads (estimates/replicates_point.sql's rep -1 sums: image-unit sums and
  cluster-unit sums of means, with the case and cluster counts);
* per unit, the means and the centred cross-products over clusters of the delta method's terms
  (sql/sites/site_terms.sql): the hub pools them with the parallel (Chan) update, exact and stable, and the
  delta method's sum of squared residuals is C_yy - 2 R C_xy + R^2 C_xx (the residuals' mean is 0);
* the replicate sums of the `poisson` scheme: the weights of autheval.estimation.bootstrap.poisson_weights
  over the site's own clusters in rank order, seeded by `site_seed(seed, site)`, so the clusters are
  namespaced by site (no two sites share a weight stream) and the hub adds the sites' sums.

Disclosure control: an analysis with fewer clusters than the declared minimum, or fewer clusters with a
changed case, is suppressed with the reason (no number of it is written). This is disclosure control,
not differential privacy: totals and B replicate sums of G clusters are B + 1 linear combinations of
the per-cluster sums; with B >= G and the seed known, the hub could solve for per-cluster sums. Where
that matters, keep B < G (the minimum counts) or use a site-secret seed (valid, but then the pooled
replicates are not the ones the hub's seed would give).

The manifest names the software, the scheme, seed and replicates, the hash of the site's input
(autheval.io, as `evaluate` records it) and the SHA-256 of every exported file; with a key it is signed
(autheval.sites.signing).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from autheval.errors import RecordError

EXPORT_FORMAT = "autheval-site-export/1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
STATISTICS = "statistics.json"
REPLICATES = "replicates.parquet"
EXPORT_FILES = (STATISTICS, REPLICATES)
SCHEME = "poisson"
TERMS = ("x_n", "x_changed", "y_exec", "y_prop", "y_gap", "y_glob", "y_total_gap", "y_utility_gap")
DEFAULT_MIN_CLUSTERS = 5
DEFAULT_MIN_CHANGED_CLUSTERS = 5


def site_seed(seed: int, site: str) -> int:
    """The seed of a site's poisson weights: the hub's seed namespaced by the site's name (a hash, below
    2^62), so that the sites' clusters never share a weight stream."""
    digest = hashlib.sha256(f"autheval-site-seed\0{int(seed)}\0{site}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


def sum_columns() -> tuple[str, ...]:
    """The replicate-sum columns (estimates/replicates_point.sql's layout), in the statistics matrix's order."""
    from autheval.estimation.estimators import MATRIX_TO_SUMS

    return tuple(MATRIX_TO_SUMS.values())


def _moments(values: np.ndarray) -> dict:
    """Clusters, means and centred cross-products (two passes) of a (clusters x terms) matrix."""
    g = values.shape[0]
    mean = values.sum(axis=0) / g
    centred = values - mean
    return {"clusters": int(g), "mean": mean.tolist(), "comoments": (centred.T @ centred).tolist()}


def site_statistics(records, site: str, seed: int, reps: int, min_clusters: int, min_changed_clusters: int):
    """(statistics dict, replicates Arrow table) of one record read by autheval.records.read.read_records."""
    import pyarrow as pa

    from autheval.estimation.bootstrap import one_blas_thread, poisson_products
    from autheval.estimation.estimators import MATRIX_TO_SUMS
    from autheval.records.cluster_stats import register_cluster_stats
    from warehouse import sql

    con = sql.connect(threads=1)
    try:
        register_cluster_stats(con, [records])
        counts = {r["analysis"]: r for r in sql.rows(con, "sites/site_counts")}
        totals = {r["analysis"]: r for r in sql.rows(con, "estimates/replicates_point")}
        terms = sql.run(con, "sites/site_terms")
        con.sql(sql.load_sql("records/cluster_matrix")).create_view("cluster_matrix")
        matrix_rows = con.sql("SELECT * FROM cluster_matrix ORDER BY matrix_row").arrow()
        if hasattr(matrix_rows, "read_all"):
            matrix_rows = matrix_rows.read_all()
    finally:
        con.close()
    columns = sum_columns()
    analyses, parts = [], []
    seed_of_site = site_seed(seed, site)
    for analysis in sorted(counts):
        g, changed = int(counts[analysis]["n_clusters"]), int(counts[analysis]["n_changed_clusters"])
        reason = None
        if g < min_clusters:
            reason = f"fewer than {min_clusters} clusters (the declared --min-clusters)"
        elif changed < min_changed_clusters:
            reason = (
                f"fewer than {min_changed_clusters} clusters with a changed case (the declared --min-changed-clusters)"
            )
        if reason:
            analyses.append({"analysis": analysis, "suppressed": True, "reason": reason})
            continue
        units = {}
        for unit in ("image_weighted", "cluster_equal"):
            mask = np.array(
                [
                    a == analysis and u == unit
                    for a, u in zip(terms.column("analysis").to_pylist(), terms.column("unit").to_pylist())
                ]
            )
            values = np.column_stack([terms.column(t).to_numpy(zero_copy_only=False)[mask] for t in TERMS])
            units[unit] = _moments(values)
        analyses.append(
            {
                "analysis": analysis,
                "suppressed": False,
                "reason": None,
                "n_clusters": g,
                "n_changed_clusters": changed,
                "record": {
                    "schema": records.schema,
                    "level": records.level,
                    "has_local": bool(records.has_local),
                    "has_global": bool(records.has_global),
                    "n_cases": int(records.n_cases),
                    "n_changed": int(records.n_changed),
                    "n_local": int(records.n_local),
                },
                "totals": {c: totals[analysis][c] or 0.0 for c in columns},  # unscored: 0.0, masked by the level
                "terms": list(TERMS),
                "units": units,
            }
        )
        rows = [a == analysis for a in matrix_rows.column("analysis").to_pylist()]
        matrix = np.column_stack(
            [matrix_rows.column(c).to_numpy(zero_copy_only=False)[np.array(rows)] for c in MATRIX_TO_SUMS]
        ).astype(np.float64)
        with one_blas_thread():
            sums = poisson_products(seed_of_site, 0, reps, matrix)
        block = {"analysis": pa.array([analysis] * reps, pa.string()), "rep": pa.array(np.arange(reps, dtype=np.int64))}
        for j, name in enumerate(columns):
            block[name] = pa.array(sums[:, j])
        parts.append(pa.table(block))
    schema = pa.schema([("analysis", pa.string()), ("rep", pa.int64()), *[(c, pa.float64()) for c in columns]])
    replicates = pa.concat_tables(parts) if parts else schema.empty_table()
    return {"format": EXPORT_FORMAT, "site": site, "analyses": analyses}, replicates


def _json_bytes(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def check_out_folder(out: Path, inputs: list[tuple[str, Path]], flag: str = "--out") -> Path:
    """An export's folder: new or empty (an export is never written over another), not an input."""
    out = Path(out)
    if out.is_symlink():
        raise RecordError(flag, None, f"{out} is a link; give the folder itself")
    resolved = out.resolve()
    for name, path in inputs:
        p = Path(path).resolve()
        if p == resolved or resolved in p.parents:
            raise RecordError(flag, None, f"{out} is or holds the input {name} {path}: choose another folder")
    if out.exists():
        if not out.is_dir():
            raise RecordError(flag, None, f"{out} is a file, not a folder")
        if any(out.iterdir()):
            raise RecordError(flag, None, f"{out} is not empty; an export is never written over another")
    from autheval.reporting.outputs import check_output_dir

    check_output_dir(out, flag)
    return out


def write_export(
    records,
    out: Path,
    site: str,
    seed: int,
    reps: int,
    min_clusters: int = DEFAULT_MIN_CLUSTERS,
    min_changed_clusters: int = DEFAULT_MIN_CHANGED_CLUSTERS,
    key=None,
) -> list[Path]:
    """Write one site export into the new folder `out` (all files or none), signed with `key` (an
    Ed25519 private key) when given. Returns the files written."""
    import io

    import pyarrow.parquet as pq

    from autheval import __version__
    from autheval.sites.signing import public_hex, sign
    from warehouse.atomic import atomic_dir

    statistics, replicates = site_statistics(records, site, seed, reps, min_clusters, min_changed_clusters)
    buffer = io.BytesIO()
    pq.write_table(replicates, buffer, compression="zstd")
    files = {STATISTICS: _json_bytes(statistics), REPLICATES: buffer.getvalue()}
    manifest = {
        "format": EXPORT_FORMAT,
        "site": site,
        "software": {"autheval": __version__},
        "scheme": SCHEME,
        "seed": int(seed),
        "site_seed": site_seed(seed, site),
        "reps": int(reps),
        "min_clusters": int(min_clusters),
        "min_changed_clusters": int(min_changed_clusters),
        "input": {"sha256": records.data_sha256, "schema": records.schema},
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        "signer": public_hex(key) if key is not None else None,
    }
    files[MANIFEST] = _json_bytes(manifest)
    if key is not None:
        files[SIGNATURE] = (sign(key, files[MANIFEST]) + "\n").encode("ascii")
    out = Path(out)
    try:
        with atomic_dir(out) as staging:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            os.chmod(staging, 0o755 & ~_umask())
    except OSError as err:
        raise RecordError("--out", None, f"cannot write {out}: {err.strerror or err}") from err
    return [out / name for name in files]


def _umask() -> int:
    from warehouse.atomic import current_umask

    return current_umask()
