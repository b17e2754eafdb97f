"""A site's export: the sufficient statistics of its records, never a case, a cluster id or a per-cluster row.

Per analysis (the record's name, or each arm's) the export holds:

* the totals every point estimate reads (estimates/replicates_point.sql's rep -1 sums: image-unit sums and
  cluster-unit sums of means, with the case and cluster counts);
* per unit, the means and the centred cross-products over clusters of the delta method's terms
  (sql/sites/site_terms.sql): the hub pools them with the parallel (Chan) update, exact and stable, and the
  delta method's sum of squared residuals is C_yy - 2 R C_xy + R^2 C_xx (the residuals' mean is 0);
* the replicate sums of the `poisson_by_site` scheme (autheval/estimation/by_site.py): the poisson weights
  of the stream `site_seed(seed, site)` over the site's own clusters in rank order, so that the hub's sum
  over sites is, to the bit, `evaluate --scheme poisson_by_site` of all records with ids `<site>:<id>`.
  With a secret seed (scheme `poisson_by_site_secret`) the weights are Poisson(1) draws of numpy's PCG64
  seeded by 128 bits of the operating system's random source, used once and kept nowhere
  (by_site.secret_site_products): the pooled replicates are still a valid bootstrap (independent
  Poisson(1) weights per cluster), but nobody, the site included, can reproduce them.

Per paired contrast ("A minus B": two arms on identical clusters, checked here as `compare` checks them)
the clusters, the clusters with a change in either arm (the p-value's floor) and, per unit, the means and
centred cross-products over clusters of (x_n, y_gap of A minus y_gap of B): the delta method of the
difference. Its bootstrap needs nothing more: identical clusters get identical weights, so the hub's
pooled replicate sums of the two arms are paired as one evaluation's are.

Disclosure control: an analysis with fewer clusters than the declared minimum, or fewer clusters with a
changed case, is suppressed with the reason (no number of it is written); so is a contrast with fewer
clusters with a change in either arm. This is disclosure control, not differential privacy (docs/sites.md):
totals and B replicate sums of G clusters are B + 1 linear combinations of the per-cluster sums; with
B >= G and the seed known, the hub solves them for per-cluster sums exactly, so an export under the hub's
seed refuses B >= G (check_solvable); below that the hub still learns B linear equations in the
per-cluster sums. Where that matters, use a secret seed.

The manifest names the software, the scheme, seed and replicates, the hash of each input (autheval.io, as
`evaluate` records it) and the SHA-256 of every exported file; with a key it is signed
(autheval.sites.signing).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autheval.errors import RecordError
from autheval.estimation.by_site import SITE_SCHEME, site_seed

EXPORT_FORMAT = "autheval-site-export/3"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
STATISTICS = "statistics.json"
REPLICATES = "replicates.parquet"
EXPORT_FILES = (STATISTICS, REPLICATES)
MONITOR = "monitor.json"  # the monitor part (autheval.sites.monitor)
SCHEME = SITE_SCHEME  # the hub's declared seed: pooled replicates equal one evaluation's to the bit
SECRET_SCHEME = "poisson_by_site_secret"  # each site's own secret seed: a valid bootstrap, reproducible by none
EXPORT_SCHEMES = (SCHEME, SECRET_SCHEME)
TERMS = ("x_n", "x_changed", "y_exec", "y_prop", "y_gap", "y_glob", "y_total_gap", "y_utility_gap")
CONTRAST_TERMS = ("x_n", "y_gap_difference")  # a paired contrast's delta method: Delta_authority of A minus B
STATISTICS_KEYS = ("format", "site", "analyses", "contrasts")
MANIFEST_KEYS = (
    "format",
    "site",
    "software",
    "scheme",
    "seed",
    "site_seed",
    "reps",
    "min_clusters",
    "min_changed_clusters",
    "inputs",
    "monitor",
    "per_cluster",
    "rules",
    "files",
    "signer",
)
DEFAULT_MIN_CLUSTERS = 5
DEFAULT_MIN_CHANGED_CLUSTERS = 5


def secret_entropy() -> int:
    """A site's secret seed: 128 bits from the operating system's random source."""
    import secrets

    return secrets.randbits(128)


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


def _suppressed(g: int, changed: int, min_clusters: int, min_changed_clusters: int, what: str) -> str | None:
    """Why a cell is suppressed (fewer clusters, or clusters with a change, than declared), or None."""
    if g < min_clusters:
        return f"fewer than {min_clusters} clusters (the declared --min-clusters)"
    if changed < min_changed_clusters:
        rule = "the declared --min-changed-clusters"
        return f"fewer than {min_changed_clusters} clusters with a changed case{what} ({rule})"
    return None


def check_solvable(analysis: str, clusters: int, reps: int) -> None:
    """Refuse replicate sums the hub could solve for per-cluster sums: it knows the poisson weights of the
    hub's seed, so `reps` replicates are `reps` linear equations in the analysis's `clusters` unknowns."""
    if reps >= clusters:
        raise RecordError(
            "--replicates",
            None,
            f"{reps:,} replicates of analysis {analysis!r} with {clusters:,} clusters under the hub's seed let the hub "
            "solve them for every cluster's sums: give fewer replicates than clusters, or --secret-seed",
        )


def _record_entry(records) -> dict:
    return {
        "schema": records.schema,
        "level": records.level,
        "has_local": bool(records.has_local),
        "has_global": bool(records.has_global),
        "n_cases": int(records.n_cases),
        "n_changed": int(records.n_changed),
        "n_local": int(records.n_local),
    }


def site_statistics(
    recordsets: Sequence,
    site: str,
    stream_seed: int | None,
    reps: int,
    min_clusters: int,
    min_changed_clusters: int,
    contrasts: Sequence[tuple[str, str]] = (),
    per_cluster: bool = False,
):
    """(statistics dict, replicates Arrow table) of the records (each read by
    autheval.records.read.read_records, one analysis each) and their paired contrasts ((arm a, arm b)),
    the replicates weighted by the stream `stream_seed` (poisson_by_site), or None: a secret one
    (poisson_by_site_secret), drawn here and kept nowhere. Under the hub's stream, `reps` must stay below
    every exported analysis's clusters (check_solvable) unless `per_cluster` exports the clusters' sums anyway."""
    import pyarrow as pa

    from autheval.estimation.bootstrap import one_blas_thread, poisson_products
    from autheval.estimation.by_site import secret_site_products
    from autheval.estimation.estimators import MATRIX_TO_SUMS, check_contrast_pairs
    from autheval.records.cluster_stats import register_cluster_stats
    from warehouse import sql

    by_name = {r.analysis: r for r in recordsets}
    con = sql.connect(threads=1)
    try:
        register_cluster_stats(con, list(recordsets))
        pairs = check_contrast_pairs(con, by_name, contrasts) if contrasts else []
        support = {r["contrast"]: r for r in sql.rows(con, "estimates/contrast_support")} if pairs else {}
        counts = {r["analysis"]: r for r in sql.rows(con, "sites/site_counts")}
        totals = {r["analysis"]: r for r in sql.rows(con, "estimates/replicates_point")}
        terms = sql.run(con, "sites/site_terms")
        con.sql(sql.load_sql("records/cluster_matrix")).create_view("cluster_matrix")
        matrix_rows = con.sql("SELECT * FROM cluster_matrix ORDER BY matrix_row").arrow()
        if hasattr(matrix_rows, "read_all"):
            matrix_rows = matrix_rows.read_all()
    finally:
        con.close()
    term_analysis = np.array(terms.column("analysis").to_pylist(), dtype=object)
    term_unit = np.array(terms.column("unit").to_pylist(), dtype=object)

    def unit_terms(analysis: str, unit: str) -> np.ndarray:  # (clusters x TERMS), rank order
        mask = (term_analysis == analysis) & (term_unit == unit)
        return np.column_stack([terms.column(t).to_numpy(zero_copy_only=False)[mask] for t in TERMS])

    columns = sum_columns()
    analyses, parts = [], []
    entropy = None
    matrix_analysis = np.array(matrix_rows.column("analysis").to_pylist(), dtype=object)
    for analysis in sorted(counts):
        g, changed = int(counts[analysis]["n_clusters"]), int(counts[analysis]["n_changed_clusters"])
        reason = _suppressed(g, changed, min_clusters, min_changed_clusters, "")
        if reason:
            analyses.append({"analysis": analysis, "suppressed": True, "reason": reason})
            continue
        if stream_seed is not None and not per_cluster:
            check_solvable(analysis, g, reps)
        analyses.append(
            {
                "analysis": analysis,
                "suppressed": False,
                "reason": None,
                "n_clusters": g,
                "n_changed_clusters": changed,
                "record": _record_entry(by_name[analysis]),
                "totals": {c: totals[analysis][c] or 0.0 for c in columns},  # unscored: 0.0, masked by the level
                "terms": list(TERMS),
                "units": {unit: _moments(unit_terms(analysis, unit)) for unit in ("image_weighted", "cluster_equal")},
            }
        )
        rows = matrix_analysis == analysis
        matrix = np.column_stack(
            [matrix_rows.column(c).to_numpy(zero_copy_only=False)[rows] for c in MATRIX_TO_SUMS]
        ).astype(np.float64)
        with one_blas_thread():
            if stream_seed is None:
                entropy = secret_entropy() if entropy is None else entropy  # one per export: arms stay paired
                sums = secret_site_products(entropy, reps, matrix)
            else:
                sums = poisson_products(stream_seed, 0, reps, matrix)
        block = {"analysis": pa.array([analysis] * reps, pa.string()), "rep": pa.array(np.arange(reps, dtype=np.int64))}
        for j, name in enumerate(columns):
            block[name] = pa.array(sums[:, j])
        parts.append(pa.table(block))
    exported = {a["analysis"] for a in analyses if not a["suppressed"]}
    contrast_entries = []
    for pair in pairs:
        a, b = pair["arm_a"], pair["arm_b"]
        g, changed = int(support[pair["contrast"]]["n_clusters"]), int(support[pair["contrast"]]["changed_clusters"])
        reason = _suppressed(g, changed, min_clusters, min_changed_clusters, " in either arm")
        if reason is None and not {a, b} <= exported:
            reason = "an arm is suppressed"
        entry = {"contrast": pair["contrast"], "arm_a": a, "arm_b": b}
        entry.update(suppressed=reason is not None, reason=reason)
        if reason is None:
            gap = TERMS.index("y_gap")
            units = {}
            for unit in ("image_weighted", "cluster_equal"):
                ta, tb = unit_terms(a, unit), unit_terms(b, unit)
                units[unit] = _moments(np.column_stack([ta[:, 0], ta[:, gap] - tb[:, gap]]))
            entry.update(n_clusters=g, changed_clusters=changed, terms=list(CONTRAST_TERMS), units=units)
        contrast_entries.append(entry)
    schema = pa.schema([("analysis", pa.string()), ("rep", pa.int64()), *[(c, pa.float64()) for c in columns]])
    replicates = pa.concat_tables(parts) if parts else schema.empty_table()
    statistics = {"format": EXPORT_FORMAT, "site": site, "analyses": analyses, "contrasts": contrast_entries}
    return statistics, replicates


def _json_bytes(value) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def check_out_folder(out: Path, inputs: list[tuple[str, Path]], flag: str = "--out") -> Path:
    """An export's folder: new or empty (an export is never written over another), not an input, not in
    one (a folder of logs that holds the export would read it next time)."""
    out = Path(out)
    if out.is_symlink():
        raise RecordError(flag, None, f"{out} is a link; give the folder itself")
    resolved = out.resolve()
    for name, path in inputs:
        p = Path(path).resolve()
        if p == resolved or resolved in p.parents:
            raise RecordError(flag, None, f"{out} is or holds the input {name} {path}: choose another folder")
        if p in resolved.parents:
            raise RecordError(flag, None, f"{out} lies inside the input {name} {path}: choose another folder")
    if out.exists():
        if not out.is_dir():
            raise RecordError(flag, None, f"{out} is a file, not a folder")
        if any(out.iterdir()):
            raise RecordError(flag, None, f"{out} is not empty; an export is never written over another")
    from autheval.reporting.outputs import check_output_dir

    check_output_dir(out, flag)
    return out


def every_export_name() -> frozenset[str]:
    """Every name any export may hold (its manifest, signature and every part's files): a folder holding
    anything else is refused before any of it is copied."""
    from autheval.sites.clusters import CLUSTER_FILES

    return frozenset((MANIFEST, SIGNATURE, *EXPORT_FILES, *CLUSTER_FILES, MONITOR))


def export_files(manifest: dict) -> tuple[str, ...]:
    """The files an export's manifest names: the statistics and replicate sums of its inputs (where it
    has inputs) and its monitor part (where it has one)."""
    from autheval.sites.clusters import CLUSTER_FILES

    return (
        (EXPORT_FILES if manifest.get("inputs") else ())
        + (CLUSTER_FILES if manifest.get("per_cluster") else ())
        + ((MONITOR,) if manifest.get("monitor") else ())
    )


RULES_MAX_BYTES = 1 << 20  # a declared rule file (the study's is a few kB)


def rules_entry(path) -> dict:
    """The manifest's `rules`: the version and SHA-256 of the declared rule file (autheval rules) under
    which the site scored its records, so that a hub refuses an export of other rules. A folder, FIFO or
    device, or a file past RULES_MAX_BYTES, is refused in one line naming --rules before it is read."""
    from autheval.review.rules import load_rules

    try:
        st = os.stat(path)
    except OSError as err:
        raise RecordError("--rules", None, f"{path}: no such rule file ({err.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RecordError("--rules", None, f"{path} is not a plain file (a folder, FIFO or device)")
    if st.st_size > RULES_MAX_BYTES:
        raise RecordError("--rules", None, f"{path} is larger than {RULES_MAX_BYTES:,} bytes (a rule file is a few kB)")
    rules = load_rules(path)
    return {"version": rules.version, "sha256": rules.sha256}


def write_export(
    recordsets,
    out: Path,
    site: str,
    seed: int | None,
    reps: int,
    min_clusters: int = DEFAULT_MIN_CLUSTERS,
    min_changed_clusters: int = DEFAULT_MIN_CHANGED_CLUSTERS,
    key=None,
    contrasts: Sequence[tuple[str, str]] = (),
    monitor: tuple[dict, dict] | None = None,
    salt: bytes | None = None,
    rules: dict | None = None,
) -> list[Path]:
    """Write one site export of `recordsets` (one record, or a RecordSet list: arms; none for a monitor
    part alone) and their paired `contrasts` into the new folder `out` (all files or none), signed with
    `key` (an Ed25519 private key) when given. `seed`: the hub's declared seed (scheme poisson_by_site),
    or None for a secret one (poisson_by_site_secret). `monitor`: (monitor.json's content, its manifest
    entry) of autheval.sites.monitor.monitor_part. `salt`: opt in to the per-cluster export
    (autheval.sites.clusters: one row per cluster, its id hashed with the salt; weaker protection).
    `rules`: the declared local rules the site's scores were made under (rules_entry), or None.
    Returns the files written."""
    import io

    import pyarrow.parquet as pq

    from autheval import __version__
    from autheval.sites.signing import public_hex, sign
    from warehouse.atomic import atomic_dir

    if not isinstance(recordsets, (list, tuple)):
        recordsets = [recordsets]
    stream_seed = None if seed is None else site_seed(seed, site)
    files = {}
    if recordsets:
        statistics, replicates = site_statistics(
            recordsets, site, stream_seed, reps, min_clusters, min_changed_clusters, contrasts, salt is not None
        )
        buffer = io.BytesIO()
        pq.write_table(replicates, buffer, compression="zstd")
        files = {STATISTICS: _json_bytes(statistics), REPLICATES: buffer.getvalue()}
        if salt is not None:
            from autheval.sites.clusters import CLUSTERS, EVALUATOR_CLUSTERS, cluster_tables

            exported = {a["analysis"] for a in statistics["analyses"] if not a["suppressed"]}
            for name, table in zip((CLUSTERS, EVALUATOR_CLUSTERS), cluster_tables(recordsets, exported, salt)):
                buffer = io.BytesIO()
                pq.write_table(table, buffer, compression="zstd")
                files[name] = buffer.getvalue()
    if monitor is not None:
        files[MONITOR] = _json_bytes(monitor[0])
    manifest = {
        "format": EXPORT_FORMAT,
        "site": site,
        "software": {"autheval": __version__},
        "scheme": SCHEME if seed is not None else SECRET_SCHEME,
        "seed": None if seed is None else int(seed),
        "site_seed": None if seed is None else site_seed(seed, site),
        "reps": int(reps),
        "min_clusters": int(min_clusters),
        "min_changed_clusters": int(min_changed_clusters),
        "inputs": [{"analysis": r.analysis, "sha256": r.data_sha256, "schema": r.schema} for r in recordsets],
        "monitor": None if monitor is None else monitor[1],
        "per_cluster": salt is not None,
        "rules": rules,
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
