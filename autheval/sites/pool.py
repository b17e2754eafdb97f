"""The hub: reads signed site exports (autheval.sites.export), checks each against the registered keys,
and pools them into what `evaluate` writes: point estimates, poisson bootstrap intervals and delta-method
intervals per analysis and unit, per site beside pooled, with Cochran's Q and I^2 of Delta_authority
across sites.

Pooling: totals and replicate sums are added over the sites (in site-name order); the delta method's
centred cross-products are pooled with the parallel (Chan) update. Every refusal is one line naming the
export folder and the rule; nothing is pooled when any export is refused.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autheval.errors import RecordError
from autheval.parse import load_json
from autheval.sites.export import (
    EXPORT_FILES,
    EXPORT_FORMAT,
    MANIFEST,
    REPLICATES,
    SCHEME,
    SIGNATURE,
    STATISTICS,
    TERMS,
    check_site_name,
    sum_columns,
)
from autheval.sites.signing import plain_file_bytes, verify

MAX_MANIFEST_BYTES = 1 << 20
MAX_STATISTICS_BYTES = 64 << 20
# metric -> (y term, x term) of the delta method (estimates/delta_method.sql)
DELTA_TERMS = {
    "J": ("y_exec", "x_n"),
    "intervention_rate": ("x_changed", "x_n"),
    "J_auth": ("y_prop", "x_n"),
    "Delta_authority": ("y_gap", "x_n"),
    "delta": ("y_gap", "x_changed"),
    "J_std": ("y_glob", "x_n"),
    "Delta_total": ("y_total_gap", "x_n"),
    "Delta_utility": ("y_utility_gap", "x_n"),
}
# unit -> term -> its total among the replicate-sum columns
TERM_TOTALS = {
    "image_weighted": dict(
        zip(TERMS, ("w_n", "w_changed", "w_exec", "w_prop", "w_gap", "w_glob", "w_total_gap", "w_utility_gap"))
    ),
    "cluster_equal": dict(
        zip(TERMS, ("c_n", "c_changed", "c_exec", "c_prop", "c_gap", "c_glob", "c_total_gap", "c_utility_gap"))
    ),
}
RECORD_KEYS = ("schema", "level", "has_local", "has_global")
SAME_ACROSS_SITES = ("format", "software", "scheme", "seed", "reps")


@dataclass
class SiteExport:
    folder: Path
    site: str
    manifest: dict
    manifest_sha256: str
    signature: str
    signer: str  # the registered key file's name
    analyses: dict[str, dict]
    replicates: dict[str, np.ndarray]  # analysis -> (reps x sum columns)


def _json(data: bytes, source: str) -> dict:
    value = load_json(data, source)
    if not isinstance(value, dict):
        raise RecordError(source, None, "is not a JSON object")
    return value


def read_export(folder: Path, trusted: dict[str, str], flag: str = "--export") -> SiteExport:
    """One export, verified: signed by a registered key, every file as signed, nothing else in it."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise RecordError(flag, None, f"{folder} is not an export folder (a link, a file or missing)")
    manifest_bytes = plain_file_bytes(folder / MANIFEST, flag, "site export manifest", MAX_MANIFEST_BYTES)
    manifest = _json(manifest_bytes, str(folder / MANIFEST))
    if manifest.get("format") != EXPORT_FORMAT:
        raise RecordError(flag, None, f"{folder / MANIFEST}: format {manifest.get('format')!r}, not {EXPORT_FORMAT}")
    if not (folder / SIGNATURE).exists() and not (folder / SIGNATURE).is_symlink():
        raise RecordError(flag, None, f"{folder} is unsigned (no {SIGNATURE}); the hub pools signed exports only")
    signature = plain_file_bytes(folder / SIGNATURE, flag, "signature", 1024).decode("ascii", "replace").strip()

    signer = next((name for key, name in trusted.items() if verify(key, signature, manifest_bytes)), None)
    if signer is None:
        if manifest.get("signer") not in trusted:
            raise RecordError(flag, None, f"{folder} is signed by a key not registered in --trust")
        raise RecordError(flag, None, f"{folder / MANIFEST} was altered after signing (its signature does not match)")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != set(EXPORT_FILES):
        raise RecordError(flag, None, f"{folder / MANIFEST} does not name the export's files {', '.join(EXPORT_FILES)}")
    present = sorted(p.name for p in folder.iterdir())
    extra = [n for n in present if n not in (MANIFEST, SIGNATURE, *EXPORT_FILES)]
    if extra:
        raise RecordError(flag, None, f"{folder} holds {extra[0]!r}, which the signed manifest does not name")
    blobs = {}
    for name in EXPORT_FILES:
        limit = MAX_STATISTICS_BYTES if name == STATISTICS else 1 << 34
        data = plain_file_bytes(folder / name, flag, "file of the export (a partial export)", limit)
        if hashlib.sha256(data).hexdigest() != files[name]:
            raise RecordError(
                flag, None, f"{folder / name} was altered after signing (its SHA-256 is not the signed one)"
            )
        blobs[name] = data
    site = check_site_name(str(manifest.get("site")), f"{flag} {folder}: site")
    statistics = _json(blobs[STATISTICS], str(folder / STATISTICS))
    if statistics.get("site") != site:
        raise RecordError(flag, None, f"{folder / STATISTICS} names another site than its manifest")
    analyses = {}
    for entry in statistics.get("analyses") or []:
        if entry["analysis"] in analyses:
            raise RecordError(flag, None, f"{folder / STATISTICS}: analysis {entry['analysis']!r} twice")
        analyses[entry["analysis"]] = entry
    replicates = _read_replicates(blobs[REPLICATES], folder, analyses, int(manifest["reps"]), flag)
    return SiteExport(
        folder, site, manifest, hashlib.sha256(manifest_bytes).hexdigest(), signature, signer, analyses, replicates
    )


def _read_replicates(data: bytes, folder: Path, analyses: dict, reps: int, flag: str) -> dict[str, np.ndarray]:
    import io

    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as err:  # pyarrow's errors vary by what is wrong with the file
        raise RecordError(flag, None, f"{folder / REPLICATES} is not a Parquet file: {err}") from err
    columns = sum_columns()
    if table.column_names != ["analysis", "rep", *columns]:
        raise RecordError(flag, None, f"{folder / REPLICATES} does not hold the replicate-sum columns")
    names = table.column("analysis").to_pylist()
    rep = table.column("rep").to_numpy(zero_copy_only=False)
    out = {}
    for analysis, entry in analyses.items():
        if entry.get("suppressed"):
            continue
        mask = np.array([n == analysis for n in names], dtype=bool)
        if mask.sum() != reps or not np.array_equal(rep[mask], np.arange(reps)):
            raise RecordError(
                flag, None, f"{folder / REPLICATES}: analysis {analysis!r} lacks replicates 0..{reps - 1}"
            )
        out[analysis] = np.column_stack([table.column(c).to_numpy(zero_copy_only=False)[mask] for c in columns])
    return out


def check_exports(exports: list[SiteExport], seed: int | None = None, flag: str = "--export") -> None:
    """The exports pool together: no replay, one export per site, the same format, software, scheme,
    seed and replicates (the hub's --seed when declared), no suppressed cell, the same record kind."""
    seen: dict[str, Path] = {}
    for e in exports:
        for key in (e.manifest_sha256, e.signature):
            if key in seen:
                raise RecordError(flag, None, f"{e.folder} is a replay of {seen[key]} (the same signed export twice)")
            seen[key] = e.folder
    sites: dict[str, Path] = {}
    for e in exports:
        if e.site in sites:
            raise RecordError(flag, None, f"{e.folder} and {sites[e.site]} are both exports of site {e.site!r}")
        sites[e.site] = e.folder
    first = exports[0]
    for e in exports:
        if e.manifest.get("scheme") != SCHEME:
            raise RecordError(flag, None, f"{e.folder}: scheme {e.manifest.get('scheme')!r}, not {SCHEME}")
        if seed is not None and e.manifest.get("seed") != seed:
            raise RecordError(flag, None, f"{e.folder}: seed {e.manifest.get('seed')}, not the hub's --seed {seed}")
        for key in SAME_ACROSS_SITES:
            if e.manifest.get(key) != first.manifest.get(key):
                raise RecordError(
                    flag,
                    None,
                    f"{e.folder} has {key} {e.manifest.get(key)!r} but {first.folder} has {first.manifest.get(key)!r}; "
                    "every site exports with the same software, seed and replicates",
                )
        for name, entry in e.analyses.items():
            if entry.get("suppressed"):
                raise RecordError(flag, None, f"{e.folder}: analysis {name!r} is suppressed ({entry.get('reason')})")
    by_analysis: dict[str, SiteExport] = {}
    for e in exports:
        for name, entry in e.analyses.items():
            other = by_analysis.setdefault(name, e)
            a, b = entry["record"], other.analyses[name]["record"]
            for key in RECORD_KEYS:
                if a[key] != b[key]:
                    raise RecordError(
                        flag,
                        None,
                        f"{e.folder}: analysis {name!r} has {key} {a[key]!r} but {other.folder} has {b[key]!r}",
                    )


def _chan(parts: list[dict]) -> tuple[int, np.ndarray, np.ndarray]:
    """(clusters, means, centred cross-products) of the parts pooled by the parallel update."""
    g, mean, comoments = 0, np.zeros(len(TERMS)), np.zeros((len(TERMS), len(TERMS)))
    for part in parts:
        gb, mb, cb = part["clusters"], np.asarray(part["mean"], float), np.asarray(part["comoments"], float)
        if g == 0:
            g, mean, comoments = gb, mb, cb
            continue
        total = g + gb
        d = mb - mean
        comoments = comoments + cb + np.outer(d, d) * (g * gb / total)
        mean = mean + d * (gb / total)
        g = total
    return g, mean, comoments


def _delta_rows(entries: list[dict], totals: dict[str, float]) -> dict:
    """{(unit, metric): (estimate, std_error)} of the delta method on pooled moments
    (estimates/delta_method.sql's ratio and linearised standard error)."""
    out: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    index = {t: i for i, t in enumerate(TERMS)}
    for unit, names in TERM_TOTALS.items():
        g, _, c = _chan([e["units"][unit] for e in entries])
        for metric, (y, x) in DELTA_TERMS.items():
            sx, sy = totals[names[x]], totals[names[y]]
            if sx == 0:
                out[(unit, metric)] = (None, None)
                continue
            r = sy / sx
            iy, ix = index[y], index[x]
            ss = max(c[iy, iy] - 2 * r * c[iy, ix] + r * r * c[ix, ix], 0.0)  # sum of (Y - R X)^2: its mean is 0
            out[(unit, metric)] = (r, math.sqrt(g / (g - 1) * ss) / sx if g > 1 else None)
    return out


def _records(analysis: str, entries: list[dict], source: str, data_sha256: str):
    """A RecordSet standing for the pooled record (no rows): what the availability rules read."""
    from autheval.records.schema import RecordSet

    first = entries[0]["record"]
    return RecordSet(
        analysis=analysis,
        source=source,
        schema=first["schema"],
        level=first["level"],
        has_local=first["has_local"],
        has_global=first["has_global"],
        n_cases=sum(e["record"]["n_cases"] for e in entries),
        n_clusters=sum(e["n_clusters"] for e in entries),
        n_changed=sum(e["record"]["n_changed"] for e in entries),
        data_sha256=data_sha256,
        rows=None,
        n_local=sum(e["record"]["n_local"] for e in entries),
    )


def pool_analysis(
    analysis: str, exports: list[SiteExport], quantiles: tuple[float, float], source: str, data_sha256: str
) -> tuple[list[dict], dict]:
    """The estimates rows (ESTIMATE_COLUMNS: bootstrap_poisson and delta_method) of one analysis pooled
    over `exports`, and the delta method's (estimate, se) per (unit, metric) for the heterogeneity."""
    import pyarrow as pa

    from autheval.estimation.analytic import delta_interval
    from autheval.estimation.estimators import (
        EstimationResult,
        availability_columns,
        honest_small_sample,
        kept_values,
        metric_cells,
    )
    from autheval.estimation.multiplicity import TESTED_METRICS
    from autheval.estimation.study import estimate_rows
    from warehouse import sql

    columns = sum_columns()
    entries = [e.analyses[analysis] for e in exports]
    totals = dict.fromkeys(columns, 0.0)
    sums = None
    for e, entry in zip(exports, entries):
        for c in columns:
            totals[c] += entry["totals"][c]
        sums = e.replicates[analysis].copy() if sums is None else sums + e.replicates[analysis]
    assert sums is not None
    manifest = exports[0].manifest
    reps, seed = int(manifest["reps"]), int(manifest["seed"])
    block = {
        "analysis": pa.array([analysis] * (reps + 1), pa.string()),
        "rep": pa.array(np.arange(-1, reps, dtype=np.int64)),
    }
    for j, c in enumerate(columns):
        block[c] = pa.array(np.concatenate([[totals[c]], sums[:, j]]))
    records = _records(analysis, entries, source, data_sha256)
    con = sql.connect(threads=1)
    try:
        con.register("replicate_sums", pa.table(block))
        sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
        computed = {
            (r["analysis"], r["unit"], r["metric"]): r
            for r in sql.rows(con, "estimates/intervals", {"lower": quantiles[0], "upper": quantiles[1]})
        }
    finally:
        con.close()
    result = EstimationResult(SCHEME, reps, seed, quantiles, {analysis: records})
    support = (records.n_clusters, sum(e["n_changed_clusters"] for e in entries))
    result.support = {analysis: support}
    for rec, unit, metric, row, avail in metric_cells([records], computed):
        keep = avail.available
        result.estimates.append(
            honest_small_sample(
                {
                    "analysis": analysis,
                    "unit": unit,
                    "metric": metric,
                    **kept_values(row, avail, "estimate", "ci_lower", "ci_upper"),
                    "p_value": row.get("p_value") if keep and metric in TESTED_METRICS else None,
                    "n": (rec.n_changed if metric == "delta" else rec.n_cases) if keep else 0,
                    **availability_columns(rec, avail),
                    "reps_undefined": row.get("reps_undefined") if keep else None,
                },
                rec,
                support,
                quantiles,
            )
        )
    rows = estimate_rows(result)
    delta = _delta_rows(entries, totals)
    kept = {}
    for rec, unit, metric, _, avail in metric_cells([records], {}):
        est, se = delta[(unit, metric)] if avail.available else (None, None)
        # degrees of freedom as autheval.estimation.analytic.delta_method_rows takes them: the clusters with a
        # change for delta, every cluster otherwise
        se, lo, hi = delta_interval(est, se, support[1] if metric == "delta" else support[0], quantiles)
        kept[(unit, metric)] = (est, se)
        rows.append(
            honest_small_sample(
                {
                    "analysis": analysis,
                    "unit": unit,
                    "metric": metric,
                    "estimate": est,
                    "ci_lower": lo,
                    "ci_upper": hi,
                    "p_value": None,
                    "n": (rec.n_changed if metric == "delta" else rec.n_cases) if avail.available else 0,
                    **availability_columns(rec, avail),
                    "scheme": "",
                    "interval_method": "delta_method",
                    "reps": None,
                    "seed": None,
                    "quantile_lower": quantiles[0],
                    "quantile_upper": quantiles[1],
                    "record_level": rec.level,
                    "source": source,
                    "data_sha256": data_sha256,
                    "model": "",
                },
                rec,
                support,
                quantiles,
            )
        )
    return rows, kept


def heterogeneity(per_site: dict[str, dict], metric: str = "Delta_authority") -> list[dict]:
    """Cochran's Q and I^2 of `metric` across sites, per unit, from each site's delta-method estimate
    and standard error (inverse-variance weights); None where fewer than two sites have a positive one."""
    rows = []
    for unit in TERM_TOTALS:
        pairs = [(site, *v[(unit, metric)]) for site, v in per_site.items()]
        usable = [(s, est, se) for s, est, se in pairs if est is not None and se is not None and se > 0]
        q = i2 = None
        if len(usable) >= 2:
            w = np.array([1 / se**2 for _, _, se in usable])
            d = np.array([est for _, est, _ in usable])
            mean = float((w * d).sum() / w.sum())
            q = float((w * (d - mean) ** 2).sum())
            df = len(usable) - 1
            i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
        rows.append(
            {
                "unit": unit,
                "metric": metric,
                "sites": len(usable),
                "cochran_q": q,
                "df": len(usable) - 1 if usable else None,
                "i_squared": i2,
            }
        )
    return rows


def pool(exports: list[SiteExport], quantiles: tuple[float, float] = (0.025, 0.975)) -> tuple[list[dict], dict]:
    """(estimates rows, summary) of the verified, compatible `exports`: per analysis the pooled rows
    (source 'pooled', data_sha256 naming every export's manifest hash) then each site's rows."""
    exports = sorted(exports, key=lambda e: e.site)
    rows: list[dict] = []
    summary: dict = {
        "command": "pool",
        "scheme": SCHEME,
        "seed": exports[0].manifest["seed"],
        "reps": exports[0].manifest["reps"],
        "quantiles": list(quantiles),
        "software": exports[0].manifest["software"],
        "exports": [
            {
                "site": e.site,
                "manifest_sha256": e.manifest_sha256,
                "input_sha256": e.manifest["input"]["sha256"],
                "signed_by": e.signer,
            }
            for e in exports
        ],
        "analyses": {},
    }
    for analysis in sorted({a for e in exports for a in e.analyses}):
        members = [e for e in exports if analysis in e.analyses]
        names = ";".join(f"{e.site}={e.manifest_sha256}" for e in members)
        pooled, _ = pool_analysis(analysis, members, quantiles, "pooled", names)
        per_site = {}
        site_rows = []
        for e in members:
            r, kept = pool_analysis(analysis, [e], quantiles, f"site:{e.site}", e.manifest_sha256)
            site_rows += r
            per_site[e.site] = kept
        rows += pooled + site_rows
        het = heterogeneity(per_site)
        summary["analyses"][analysis] = {
            "sites": [e.site for e in members],
            "exports": names,
            "n_clusters": sum(e.analyses[analysis]["n_clusters"] for e in members),
            "n_cases": sum(e.analyses[analysis]["record"]["n_cases"] for e in members),
            "estimates": {
                f"{r['interval_method']}/{r['unit']}/{r['metric']}": [r["estimate"], r["ci_lower"], r["ci_upper"]]
                for r in pooled
            },
            "heterogeneity": het,
        }
    return rows, summary
