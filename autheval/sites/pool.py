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
import re
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
    sum_columns,
)
from autheval.sites.names import check_site_name
from autheval.sites.signing import key_site, plain_file_bytes, verify

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


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value) -> bool:
    """A whole number from 0 (an integer, or a float below 2^53 holding one exactly)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return value >= 0
    return math.isfinite(value) and value.is_integer() and 0 <= value <= 2**53


class _Fields:
    """One line naming the export file and the field path when a field is missing or of another type."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, rule: str, value=None) -> RecordError:
        example = None if value is None else f"got {_short(value)}"
        return RecordError(str(self.path), None, f"{field} {rule}", example)

    def get(self, obj: dict, key: str, where: str):
        field = f"{where}.{key}" if where else key
        if key not in obj:
            raise RecordError(str(self.path), None, f"{field} is missing")
        return obj[key], field

    def text(self, obj: dict, key: str, where: str = "") -> str:
        value, field = self.get(obj, key, where)
        if not isinstance(value, str) or not value or len(value) > 256:
            raise self.fail(field, "must be a non-empty string (at most 256 characters)", value)
        return value

    def flag(self, obj: dict, key: str, where: str = "") -> bool:
        value, field = self.get(obj, key, where)
        if not isinstance(value, bool):
            raise self.fail(field, "must be true or false", value)
        return value

    def count(self, obj: dict, key: str, where: str = "", low: int = 0, high: int = 2**62) -> int:
        value, field = self.get(obj, key, where)
        if not _is_count(value) or not low <= value <= high:
            raise self.fail(field, f"must be a whole number from {low:,} to {high:,}", value)
        return int(value)

    def number(self, obj: dict, key: str, where: str = "") -> float:
        value, field = self.get(obj, key, where)
        if not _is_number(value):
            raise self.fail(field, "must be a finite number", value)
        return float(value)

    def obj(self, obj: dict, key: str, where: str = "") -> dict:
        value, field = self.get(obj, key, where)
        if not isinstance(value, dict):
            raise self.fail(field, "must be an object", value)
        return value

    def array(self, obj: dict, key: str, shape: tuple[int, ...], where: str = "") -> np.ndarray:
        value, field = self.get(obj, key, where)
        dims = "x".join(str(n) for n in shape)
        rule = f"must be {'an' if dims[0] == '8' or dims[:2] in ('11', '18') else 'a'} {dims} array of finite numbers"
        if not _shaped(value, shape):
            raise self.fail(field, rule)
        return np.asarray(value, dtype=np.float64)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shaped(value, shape: tuple[int, ...]) -> bool:
    if not shape:
        return _is_number(value)
    return isinstance(value, list) and len(value) == shape[0] and all(_shaped(v, shape[1:]) for v in value)


HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_ANALYSES = 10_000


def check_manifest(manifest: dict, path: Path) -> None:
    """Every field of a signed manifest, its type and range, before any of it is used."""
    from autheval.estimation.estimators import MAX_REPS
    from autheval.sites.export import site_seed
    from autheval.vocabulary import SEED_MAX

    f = _Fields(path)
    site = f.text(manifest, "site")
    check_site_name(site, f"{path}: site")
    software = f.obj(manifest, "software")
    f.text(software, "autheval", "software")
    f.text(manifest, "scheme")
    seed = f.count(manifest, "seed", high=SEED_MAX)
    if f.count(manifest, "site_seed", high=SEED_MAX) != site_seed(seed, site):
        raise f.fail("site_seed", f"is not the seed of site {site!r} under seed {seed}")
    f.count(manifest, "reps", low=1, high=MAX_REPS)
    f.count(manifest, "min_clusters", high=1_000_000_000)
    f.count(manifest, "min_changed_clusters", high=1_000_000_000)
    source = f.obj(manifest, "input")
    f.text(source, "sha256", "input")
    f.text(source, "schema", "input")
    files = f.obj(manifest, "files")
    if set(files) != set(EXPORT_FILES):
        raise f.fail("files", f"must name exactly the export's files {', '.join(EXPORT_FILES)}")
    for name in EXPORT_FILES:
        if not isinstance(files[name], str) or not HEX64.match(files[name]):
            raise f.fail(f"files.{name}", "must be a SHA-256 (64 lower-case hex digits)", files[name])
    signer = f.text(manifest, "signer")
    if not HEX64.match(signer):
        raise f.fail("signer", "must be an Ed25519 public key (64 lower-case hex digits)", signer)


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= 1e-9 * (1.0 + abs(a) + abs(b) + scale)


def check_statistics(statistics: dict, path: Path, manifest: dict) -> dict[str, dict]:
    """{analysis: entry} of a signed statistics.json, every field checked for type, shape and range, and
    the counts, totals and moments checked against each other; one line naming the file and the field.
    Overflow in the checks' own arithmetic is a failed check, never a warning."""
    with np.errstate(all="ignore"):
        return _check_statistics(statistics, path, manifest)


def _check_statistics(statistics: dict, path: Path, manifest: dict) -> dict[str, dict]:
    from autheval.records.schema import FULL, PROPOSAL_ONLY, ROLE_SEPARATED

    f = _Fields(path)
    if f.text(statistics, "format") != EXPORT_FORMAT:
        raise f.fail("format", f"must be {EXPORT_FORMAT}", statistics["format"])
    if f.text(statistics, "site") != manifest["site"]:
        raise f.fail("site", f"names another site than its manifest ({manifest['site']!r})", statistics["site"])
    entries, _ = f.get(statistics, "analyses", "")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ANALYSES:
        raise f.fail("analyses", f"must be a list of 1 to {MAX_ANALYSES:,} analyses")
    columns = sum_columns()
    analyses: dict[str, dict] = {}
    for i, entry in enumerate(entries):
        at = f"analyses[{i}]"
        if not isinstance(entry, dict):
            raise f.fail(at, "must be an object", entry)
        name = f.text(entry, "analysis", at)
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
            raise f.fail(f"{at}.analysis", "must hold no control character", name)
        if name in analyses:
            raise f.fail(f"{at}.analysis", "names an analysis twice", name)
        analyses[name] = entry
        if f.flag(entry, "suppressed", at):
            f.text(entry, "reason", at)
            continue
        g = f.count(entry, "n_clusters", at, low=1)
        changed_clusters = f.count(entry, "n_changed_clusters", at, high=g)
        if g < manifest["min_clusters"] or changed_clusters < manifest["min_changed_clusters"]:
            raise f.fail(at, "is below the manifest's minimum counts but is not suppressed")
        record = f.obj(entry, "record", at)
        rat = f"{at}.record"
        f.text(record, "schema", rat)
        if f.text(record, "level", rat) not in (FULL, ROLE_SEPARATED, PROPOSAL_ONLY):
            raise f.fail(f"{rat}.level", f"must be one of {FULL}, {ROLE_SEPARATED}, {PROPOSAL_ONLY}", record["level"])
        f.flag(record, "has_local", rat)
        f.flag(record, "has_global", rat)
        n_cases = f.count(record, "n_cases", rat, low=g)
        n_changed = f.count(record, "n_changed", rat, high=n_cases)
        f.count(record, "n_local", rat, high=n_cases)
        bound = n_changed_bound(changed_clusters, n_cases, g)
        if not changed_clusters <= n_changed <= bound or (changed_clusters == 0) != (n_changed == 0):
            raise f.fail(f"{rat}.n_changed", f"is inconsistent with {at}.n_changed_clusters", n_changed)
        totals = f.obj(entry, "totals", at)
        if set(totals) != set(columns):
            raise f.fail(f"{at}.totals", f"must name exactly the sums {', '.join(columns)}")
        for c in columns:
            f.number(totals, c, f"{at}.totals")
        for c, want in (("w_n", n_cases), ("c_n", g), ("w_changed", n_changed)):
            if totals[c] != want:
                raise f.fail(f"{at}.totals.{c}", f"must equal the counts' {want:,}", totals[c])
        if not 0 <= totals["c_changed"] <= g:
            raise f.fail(f"{at}.totals.c_changed", f"must lie in [0, n_clusters {g:,}]", totals["c_changed"])
        terms, _ = f.get(entry, "terms", at)
        if terms != list(TERMS):
            raise f.fail(f"{at}.terms", f"must be {', '.join(TERMS)}")
        units = f.obj(entry, "units", at)
        if set(units) != set(TERM_TOTALS):
            raise f.fail(f"{at}.units", f"must name exactly the units {', '.join(TERM_TOTALS)}")
        k = len(TERMS)
        for unit, names in TERM_TOTALS.items():
            uat = f"{at}.units.{unit}"
            part = f.obj(units, unit, f"{at}.units")
            if f.count(part, "clusters", uat) != g:
                raise f.fail(f"{uat}.clusters", f"must equal {at}.n_clusters ({g:,})", part["clusters"])
            mean = f.array(part, "mean", (k,), uat)
            comoments = f.array(part, "comoments", (k, k), uat)
            diag = np.diag(comoments)
            if not np.allclose(comoments, comoments.T, rtol=1e-9, atol=0) or (diag < 0).any():
                raise f.fail(f"{uat}.comoments", "must be symmetric with no negative sum of squares")
            for j, term in enumerate(TERMS):
                spread = math.sqrt(g * (diag[j] + g * mean[j] ** 2))
                if not math.isfinite(mean[j] * g) or not _close(mean[j] * g, totals[names[term]], spread):
                    raise f.fail(
                        f"{uat}.mean[{j}]",
                        f"({term}) times the clusters must equal {at}.totals.{names[term]}",
                        float(mean[j]),
                    )
    return analyses


def n_changed_bound(changed_clusters: int, n_cases: int, g: int) -> int:
    """The most changed cases `changed_clusters` clusters can hold when every cluster holds a case."""
    return n_cases - (g - changed_clusters)


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

    signer_hex = next((key for key in trusted if verify(key, signature, manifest_bytes)), None)
    if signer_hex is None:
        if manifest.get("signer") not in trusted:
            raise RecordError(flag, None, f"{folder} is signed by a key not registered in --trust")
        raise RecordError(flag, None, f"{folder / MANIFEST} was altered after signing (its signature does not match)")
    check_manifest(manifest, folder / MANIFEST)
    signer = trusted[signer_hex]
    if manifest["signer"] != signer_hex:
        raise RecordError(
            flag, None, f"{folder / MANIFEST}: signer names another key than the one that signed it ({signer})"
        )
    site = manifest["site"]
    if key_site(signer) != site:
        raise RecordError(
            flag,
            None,
            f"{folder} is an export of site {site!r} signed by the key registered for site "
            f"{key_site(signer)!r} ({signer}); a key signs for its own site only",
        )
    files = manifest["files"]
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
    statistics = _json(blobs[STATISTICS], str(folder / STATISTICS))
    analyses = check_statistics(statistics, folder / STATISTICS, manifest)
    replicates = _read_replicates(blobs[REPLICATES], folder, analyses, manifest["reps"], flag)
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
    import pyarrow as pa

    columns = sum_columns()
    source = str(folder / REPLICATES)
    expected = pa.schema([("analysis", pa.string()), ("rep", pa.int64()), *[(c, pa.float64()) for c in columns]])
    if table.column_names != expected.names:
        raise RecordError(source, None, f"must hold the columns {', '.join(expected.names)}, in that order")
    for field in expected:
        if table.schema.field(field.name).type != field.type:
            got = table.schema.field(field.name).type
            raise RecordError(source, field.name, f"must be of type {field.type}", f"got {got}")
    if table.num_rows != reps * sum(1 for e in analyses.values() if not e["suppressed"]):
        raise RecordError(source, None, f"must hold {reps:,} replicates per analysis not suppressed, no other row")
    names = table.column("analysis").to_pylist()
    rep = table.column("rep").to_numpy(zero_copy_only=False)
    out = {}
    for analysis, entry in analyses.items():
        if entry["suppressed"]:
            continue
        mask = np.array([n == analysis for n in names], dtype=bool)
        if mask.sum() != reps or not np.array_equal(rep[mask], np.arange(reps)):
            raise RecordError(source, "rep", f"analysis {analysis!r} must hold replicates 0..{reps - 1} once each")
        sums = np.column_stack([table.column(c).to_numpy(zero_copy_only=False)[mask] for c in columns])
        sums = sums.astype(np.float64)
        for j, c in enumerate(columns):
            if not np.isfinite(sums[:, j]).all():
                raise RecordError(source, c, f"analysis {analysis!r} holds a null, NaN or infinite replicate sum")
            if c in ("w_n", "c_n", "w_changed", "c_changed") and (sums[:, j] < 0).any():
                raise RecordError(source, c, f"analysis {analysis!r} holds a negative count's replicate sum")
        out[analysis] = sums
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


def _check_finite(analysis: str, rows: list[dict], het: list[dict]) -> None:
    """Refuse (one line) a pooled or per-site number that is NaN or infinite: signed values the validation
    let through whose arithmetic overflows are never written."""
    for row in [*rows, *het]:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                where = row.get("source", "heterogeneity")
                raise RecordError(
                    "--export",
                    None,
                    f"analysis {analysis!r} ({where}): {row.get('unit')} {row.get('metric')} {key} is {value} "
                    "(the exported sums overflow); nothing is pooled",
                )


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
    with np.errstate(all="ignore"):  # an overflow is refused by _check_finite, in one line, not warned of
        for analysis in sorted({a for e in exports for a in e.analyses}):
            _pool_one(analysis, exports, quantiles, rows, summary)
    return rows, summary


def _pool_one(analysis: str, exports: list[SiteExport], quantiles: tuple[float, float], rows: list, summary: dict):
    """Append the pooled and per-site rows of one analysis to `rows` and its entry to `summary`."""
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
    _check_finite(analysis, pooled + site_rows, het)
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
