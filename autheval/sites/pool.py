"""The hub: reads signed site exports (autheval.sites.export), checks each against the registered keys,
and pools them into what `evaluate` and `compare` write: point estimates, poisson_by_site bootstrap
intervals and delta-method intervals per analysis and unit, and paired contrasts, per site beside pooled,
with Cochran's Q and I^2 of Delta_authority across sites.

Pooling: totals and replicate sums are added over the sites in site-name order (the replicate sums by
autheval.estimation.by_site.sum_over_sites, the addition `evaluate --scheme poisson_by_site` makes, so
the pooled replicates are its replicates to the bit); the delta method's centred cross-products are
pooled with the parallel (Chan) update. Every refusal is one line naming the export folder and the rule;
nothing is pooled when any export is refused.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autheval.errors import RecordError
from autheval.estimation.multiplicity import DEFAULT_CONTRAST_FAMILY
from autheval.estimation.study import CONTRAST_COLUMNS
from autheval.sites.export import (
    CONTRAST_TERMS,
    EXPORT_FORMAT,
    EXPORT_SCHEMES,
    MANIFEST,
    MANIFEST_KEYS,
    MONITOR,
    REPLICATES,
    SCHEME,
    SIGNATURE,
    STATISTICS,
    STATISTICS_KEYS,
    TERMS,
    export_files,
    sum_columns,
)
from autheval.sites.fields import Fields, json_object
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
# paired_contrast.csv of the hub: compare's columns (autheval.estimation.study.CONTRAST_COLUMNS) with the
# arms, then how each interval was formed and from which exports
POOLED_CONTRAST_COLUMNS = (
    CONTRAST_COLUMNS[0],
    "arm_a",
    "arm_b",
    *CONTRAST_COLUMNS[1:],
    "interval_method",
    "scheme",
    "reps",
    "seed",
    "source",
    "data_sha256",
)
SAME_ACROSS_SITES = ("format", "software", "scheme", "seed", "reps", "rules")


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
    contrasts: dict[str, dict]  # "A minus B" -> its entry (arms, clusters, the difference's moments)
    monitor: dict | None = None  # the monitor part (autheval.sites.monitor.check_monitor), where it has one
    clusters: dict | None = None  # analysis -> (per-cluster sums, evaluator terms): a per-cluster export's


HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_ANALYSES = 10_000


def check_manifest(manifest: dict, path: Path) -> None:
    """Every field of a signed manifest, its type and range, before any of it is used."""
    from autheval.estimation.estimators import MAX_REPS
    from autheval.sites.export import site_seed
    from autheval.vocabulary import SEED_MAX

    f = Fields(path)
    f.only(manifest, MANIFEST_KEYS)
    site = f.text(manifest, "site")
    check_site_name(site, f"{path}: site")
    software = f.obj(manifest, "software")
    f.text(software, "autheval", "software")
    scheme = f.text(manifest, "scheme")
    if scheme not in EXPORT_SCHEMES:
        raise f.fail("scheme", f"must be one of {', '.join(EXPORT_SCHEMES)}", scheme)
    if scheme == SCHEME:
        seed = f.count(manifest, "seed", high=SEED_MAX)
        if f.count(manifest, "site_seed", high=SEED_MAX) != site_seed(seed, site):
            raise f.fail("site_seed", f"is not the seed of site {site!r} under seed {seed}")
    else:
        for key in ("seed", "site_seed"):
            if f.get(manifest, key, "")[0] is not None:
                raise f.fail(key, f"must be null: the {scheme} scheme's seed is the site's secret", manifest[key])
    f.count(manifest, "reps", low=1, high=MAX_REPS)
    f.count(manifest, "min_clusters", high=1_000_000_000)
    f.count(manifest, "min_changed_clusters", high=1_000_000_000)
    inputs, _ = f.get(manifest, "inputs", "")
    monitor, _ = f.get(manifest, "monitor", "")
    if not isinstance(inputs, list) or not (0 if monitor else 1) <= len(inputs) <= MAX_ANALYSES:
        raise f.fail("inputs", f"must be a list of 1 to {MAX_ANALYSES:,} inputs (0 with a monitor part)")
    for i, source in enumerate(inputs):
        if not isinstance(source, dict):
            raise f.fail(f"inputs[{i}]", "must be an object", source)
        for key in ("analysis", "sha256", "schema"):
            f.text(source, key, f"inputs[{i}]")
    files = f.obj(manifest, "files")
    if monitor is not None:
        _check_monitor_entry(f, f.obj(manifest, "monitor"), manifest["reps"])
    if f.flag(manifest, "per_cluster") and not inputs:
        raise f.fail("per_cluster", "needs the export's record statistics (--input)")
    expected = export_files(manifest)
    if set(files) != set(expected):
        raise f.fail("files", f"must name exactly the export's files {', '.join(expected)}")
    for name in expected:
        if not isinstance(files[name], str) or not HEX64.match(files[name]):
            raise f.fail(f"files.{name}", "must be a SHA-256 (64 lower-case hex digits)", files[name])
    if f.get(manifest, "rules", "")[0] is not None:
        rules = f.obj(manifest, "rules")
        f.only(rules, ("version", "sha256"), "rules")
        f.text(rules, "version", "rules")
        if not HEX64.match(f.text(rules, "sha256", "rules")):
            raise f.fail("rules.sha256", "must be a SHA-256 (64 lower-case hex digits)", rules["sha256"])
    signer = f.text(manifest, "signer")
    if not HEX64.match(signer):
        raise f.fail("signer", "must be an Ed25519 public key (64 lower-case hex digits)", signer)


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= 1e-9 * (1.0 + abs(a) + abs(b) + scale)


def check_statistics(statistics: dict, path: Path, manifest: dict) -> tuple[dict[str, dict], dict[str, dict]]:
    """({analysis: entry}, {contrast: entry}) of a signed statistics.json, every field checked for type,
    shape and range, and the counts, totals and moments checked against each other; one line naming the
    file and the field. Overflow in the checks' own arithmetic is a failed check, never a warning."""
    with np.errstate(all="ignore"):
        analyses = _check_statistics(statistics, path, manifest)
        return analyses, _check_contrasts(statistics, path, manifest, analyses)


def _check_moments(f: Fields, part: dict, at: str, g: int, names: tuple[str, ...], totals: list[float]) -> None:
    """A unit's clusters, means and centred cross-products of `names`, the means times the clusters
    equal to `totals` (what the hub's delta method reads)."""
    k = len(names)
    if f.count(part, "clusters", at) != g:
        raise f.fail(f"{at}.clusters", f"must equal the clusters ({g:,})", part["clusters"])
    mean = f.array(part, "mean", (k,), at)
    comoments = f.array(part, "comoments", (k, k), at)
    diag = np.diag(comoments)
    if not np.allclose(comoments, comoments.T, rtol=1e-9, atol=0) or (diag < 0).any():
        raise f.fail(f"{at}.comoments", "must be symmetric with no negative sum of squares")
    for j, term in enumerate(names):
        spread = math.sqrt(g * (diag[j] + g * mean[j] ** 2))
        if not math.isfinite(mean[j] * g) or not _close(mean[j] * g, totals[j], spread):
            rule = f"({term}) times the clusters must equal its total {totals[j]!r}"
            raise f.fail(f"{at}.mean[{j}]", rule, float(mean[j]))


def _named_entries(
    f: Fields, statistics: dict, key: str, what: str, low: int, name_of: Callable[[dict, str], str]
) -> Iterator[tuple[str, dict]]:
    """Each entry of the list `key` that is not suppressed, with where it stands; every entry is first an
    object whose name (`name_of` checks it) is new, and a suppressed one states its reason."""
    entries, _ = f.get(statistics, key, "")
    if not isinstance(entries, list) or not low <= len(entries) <= MAX_ANALYSES:
        span = f"at most {MAX_ANALYSES:,}" if low == 0 else f"{low} to {MAX_ANALYSES:,}"
        raise f.fail(key, f"must be a list of {span} {what}")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        at = f"{key}[{i}]"
        if not isinstance(entry, dict):
            raise f.fail(at, "must be an object", entry)
        name = name_of(entry, at)
        if name in seen:
            field = "contrast" if key == "contrasts" else "analysis"
            raise f.fail(f"{at}.{field}", f"names {'a' if key == 'contrasts' else 'an'} {field} twice", name)
        seen.add(name)
        if f.flag(entry, "suppressed", at):
            f.text(entry, "reason", at)
            continue
        yield at, entry


def _check_units(f: Fields, entry: dict, at: str, g: int, terms: tuple[str, ...], totals: dict[str, list]) -> None:
    """An entry's `terms` and per-unit moments, each unit's means matching its `totals`."""
    listed, _ = f.get(entry, "terms", at)
    if listed != list(terms):
        raise f.fail(f"{at}.terms", f"must be {', '.join(terms)}")
    units = f.obj(entry, "units", at)
    if set(units) != set(TERM_TOTALS):
        raise f.fail(f"{at}.units", f"must name exactly the units {', '.join(TERM_TOTALS)}")
    for unit in TERM_TOTALS:
        _check_moments(f, f.obj(units, unit, f"{at}.units"), f"{at}.units.{unit}", g, terms, totals[unit])


def _check_contrasts(statistics: dict, path: Path, manifest: dict, analyses: dict[str, dict]) -> dict[str, dict]:
    f = Fields(path)

    def name_of(entry: dict, at: str) -> str:
        name, a, b = (f.text(entry, key, at) for key in ("contrast", "arm_a", "arm_b"))
        if name != f"{a} minus {b}" or a == b or a not in analyses or b not in analyses:
            raise f.fail(f"{at}.contrast", "must be '<arm_a> minus <arm_b>' of two of the export's analyses", name)
        return name

    for at, entry in _named_entries(f, statistics, "contrasts", "paired contrasts", 0, name_of):
        g = f.count(entry, "n_clusters", at, low=1)
        changed = f.count(entry, "changed_clusters", at, high=g)
        arm_a, arm_b = analyses[entry["arm_a"]], analyses[entry["arm_b"]]
        if arm_a["suppressed"] or arm_b["suppressed"]:
            raise f.fail(at, "pairs a suppressed arm but is not suppressed")
        if arm_a["n_clusters"] != g or arm_b["n_clusters"] != g:
            raise f.fail(f"{at}.n_clusters", "must equal both arms' n_clusters (a paired contrast's clusters)", g)
        if g < manifest["min_clusters"] or changed < manifest["min_changed_clusters"]:
            raise f.fail(at, "is below the manifest's minimum counts but is not suppressed")
        ca, cb = arm_a["n_changed_clusters"], arm_b["n_changed_clusters"]
        if not max(ca, cb) <= changed <= min(g, ca + cb):
            raise f.fail(f"{at}.changed_clusters", "is inconsistent with the arms' n_changed_clusters", changed)
        ta, tb = arm_a["totals"], arm_b["totals"]
        unit_totals = {u: [ta[t["x_n"]], ta[t["y_gap"]] - tb[t["y_gap"]]] for u, t in TERM_TOTALS.items()}
        _check_units(f, entry, at, g, CONTRAST_TERMS, unit_totals)
    return {e["contrast"]: e for e in statistics["contrasts"]}


def _check_statistics(statistics: dict, path: Path, manifest: dict) -> dict[str, dict]:
    from autheval.records.schema import FULL, PROPOSAL_ONLY, ROLE_SEPARATED

    f = Fields(path)
    f.only(statistics, STATISTICS_KEYS)
    if f.text(statistics, "format") != EXPORT_FORMAT:
        raise f.fail("format", f"must be {EXPORT_FORMAT}", statistics["format"])
    if f.text(statistics, "site") != manifest["site"]:
        raise f.fail("site", f"names another site than its manifest ({manifest['site']!r})", statistics["site"])
    columns = sum_columns()

    def name_of(entry: dict, at: str) -> str:
        name = f.text(entry, "analysis", at)
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
            raise f.fail(f"{at}.analysis", "must hold no control character", name)
        return name

    for at, entry in _named_entries(f, statistics, "analyses", "analyses", 1, name_of):
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
        _check_units(f, entry, at, g, TERMS, {u: [totals[t[n]] for n in TERMS] for u, t in TERM_TOTALS.items()})
    return {e["analysis"]: e for e in statistics["analyses"]}


def n_changed_bound(changed_clusters: int, n_cases: int, g: int) -> int:
    """The most changed cases `changed_clusters` clusters can hold when every cluster holds a case."""
    return n_cases - (g - changed_clusters)


def read_export(folder: Path, trusted: dict[str, str], flag: str = "--export") -> SiteExport:
    """One export, verified: signed by a registered key, every file as signed, nothing else in it."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise RecordError(flag, None, f"{folder} is not an export folder (a link, a file or missing)")
    manifest_bytes = plain_file_bytes(folder / MANIFEST, flag, "site export manifest", MAX_MANIFEST_BYTES)
    manifest = json_object(manifest_bytes, str(folder / MANIFEST))
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
    expected = export_files(manifest)
    extra = [n for n in present if n not in (MANIFEST, SIGNATURE, *expected)]
    if extra:
        raise RecordError(flag, None, f"{folder} holds {extra[0]!r}, which the signed manifest does not name")
    blobs = {}
    for name in expected:
        limit = MAX_STATISTICS_BYTES if name in (STATISTICS, MONITOR) else 1 << 36
        data = plain_file_bytes(folder / name, flag, "file of the export (a partial export)", limit)
        if hashlib.sha256(data).hexdigest() != files[name]:
            raise RecordError(
                flag, None, f"{folder / name} was altered after signing (its SHA-256 is not the signed one)"
            )
        blobs[name] = data
    analyses: dict[str, dict] = {}
    contrasts: dict[str, dict] = {}
    replicates: dict[str, np.ndarray] = {}
    monitor = None
    if STATISTICS in blobs:
        statistics = json_object(blobs[STATISTICS], str(folder / STATISTICS))
        analyses, contrasts = check_statistics(statistics, folder / STATISTICS, manifest)
        replicates = _read_replicates(blobs[REPLICATES], folder, analyses, manifest["reps"], flag)
    clusters = None
    if manifest["per_cluster"]:
        from autheval.sites.clusters import read_cluster_tables

        clusters = read_cluster_tables(blobs, folder, analyses, flag)
    if MONITOR in blobs:
        from autheval.sites.monitor import check_monitor

        monitor = check_monitor(json_object(blobs[MONITOR], str(folder / MONITOR)), folder / MONITOR, manifest)
    manifest_sha256 = hashlib.sha256(manifest_bytes).hexdigest()
    return SiteExport(
        folder, site, manifest, manifest_sha256, signature, signer, analyses, replicates, contrasts, monitor, clusters
    )


def _check_monitor_entry(f: Fields, entry: dict, reps: int) -> None:
    """The manifest's monitor entry: the protocol it was made under, the fixed-sample replicates (the
    export's), each log's name and SHA-256."""
    f.text(entry, "protocol_version", "monitor")
    if not HEX64.match(f.text(entry, "protocol_sha256", "monitor")):
        raise f.fail(
            "monitor.protocol_sha256", "must be a SHA-256 (64 lower-case hex digits)", entry["protocol_sha256"]
        )
    if f.count(entry, "reps", "monitor") != reps:
        raise f.fail("monitor.reps", f"must equal the export's reps {reps}", entry["reps"])
    logs, _ = f.get(entry, "logs", "monitor")
    if not isinstance(logs, list) or not 1 <= len(logs) <= 1_000_000:
        raise f.fail("monitor.logs", "must be a list of the site's logs, at least one")
    for i, log in enumerate(logs):
        if not isinstance(log, dict) or set(log) != {"file", "sha256"}:
            raise f.fail(f"monitor.logs[{i}]", "must be an object of file and sha256", log)
        name = f.text(log, "file", f"monitor.logs[{i}]")
        if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
            raise f.fail(f"monitor.logs[{i}].file", "must be a log's plain file name (no folder)", name)
        if not HEX64.match(f.text(log, "sha256", f"monitor.logs[{i}]")):
            raise f.fail(f"monitor.logs[{i}].sha256", "must be a SHA-256 (64 lower-case hex digits)", log["sha256"])


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


def _rules_text(rules: dict) -> str:
    return f"{rules['version']!r} (sha256 {rules['sha256'][:12]}...)"


def _same_text(key: str, value) -> str:
    """A manifest's value as a refusal names it (declared rules by version and hash, none as `none`)."""
    if key == "rules":
        return "none" if value is None else _rules_text(value)
    return repr(value)


def check_exports(
    exports: list[SiteExport], seed: int | None = None, flag: str = "--export", rules: dict | None = None
) -> None:
    """The exports pool together: no replay, one export per site, the same format, software, scheme,
    seed, replicates and declared rules (the hub's --seed and --rules when declared; no secret seed
    then), no suppressed cell, the same record kind, the same paired contrasts of the same arms."""
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
        if seed is not None and e.manifest.get("scheme") != SCHEME:
            scheme = e.manifest.get("scheme")
            raise RecordError(flag, None, f"{e.folder}: scheme {scheme} (a secret seed), not the hub's --seed {seed}")
        if seed is not None and e.manifest.get("seed") != seed:
            raise RecordError(flag, None, f"{e.folder}: seed {e.manifest.get('seed')}, not the hub's --seed {seed}")
        if rules is not None and e.manifest.get("rules") != rules:
            declared = e.manifest.get("rules")
            what = "declares no rules" if declared is None else f"was scored under rules {_rules_text(declared)}"
            raise RecordError(flag, None, f"{e.folder} {what}, not the hub's --rules {_rules_text(rules)}")
        for key in SAME_ACROSS_SITES:
            if e.manifest.get(key) != first.manifest.get(key):
                this, that = (_same_text(key, x.manifest.get(key)) for x in (e, first))
                raise RecordError(
                    flag,
                    None,
                    f"{e.folder} has {key} {this} but {first.folder} has {that}; "
                    "every site exports with the same software, scheme, seed, replicates and rules",
                )
        if e.manifest["per_cluster"] != first.manifest["per_cluster"]:
            kinds = {True: "a per-cluster export", False: "an aggregate export"}
            raise RecordError(
                flag,
                None,
                f"{e.folder} is {kinds[e.manifest['per_cluster']]} but {first.folder} is "
                f"{kinds[first.manifest['per_cluster']]}; every site opts in to --per-cluster, or none",
            )
        if bool(e.analyses) != bool(first.analyses):
            holds = {True: "holds", False: "holds no"}
            raise RecordError(
                flag,
                None,
                f"{e.folder} {holds[bool(e.analyses)]} record statistics but {first.folder} "
                f"{holds[bool(first.analyses)]}; every site exports the same parts (--input, --monitor)",
            )
        for name, entry in e.analyses.items():
            if entry.get("suppressed"):
                raise RecordError(flag, None, f"{e.folder}: analysis {name!r} is suppressed ({entry.get('reason')})")
        for name, entry in e.contrasts.items():
            if entry.get("suppressed"):
                raise RecordError(flag, None, f"{e.folder}: contrast {name!r} is suppressed ({entry.get('reason')})")
        if set(e.contrasts) != set(first.contrasts):
            ours, theirs = sorted(set(e.contrasts)), sorted(set(first.contrasts))
            raise RecordError(
                flag,
                None,
                f"{e.folder} exports the paired contrasts {ours} but {first.folder} exports {theirs}; "
                "every site contrasts the same mechanisms",
            )
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


def _bootstrap(exports: list[SiteExport]) -> tuple[str, int, int | None]:
    """(scheme, replicates, seed) of compatible exports: the seed None where each site's is secret."""
    manifest = exports[0].manifest
    seed = manifest["seed"] if manifest["scheme"] == SCHEME else None
    return manifest["scheme"], int(manifest["reps"]), seed


def pooled_totals(analysis: str, exports: list[SiteExport]) -> dict[str, float]:
    """The totals of `analysis` added over the exports (site-name order)."""
    totals = dict.fromkeys(sum_columns(), 0.0)
    for e in exports:
        for c in totals:
            totals[c] += e.analyses[analysis]["totals"][c]
    return totals


def _metrics_connection(analyses: list[str], exports: list[SiteExport]):
    """A DuckDB connection holding replicate_metrics (estimates/replicate_metrics.sql) of `analyses` pooled
    over `exports`: rep -1 from the pooled totals, the replicates from the sites' replicate sums added by
    sum_over_sites (the poisson_by_site scheme's own addition)."""
    import pyarrow as pa

    from autheval.estimation.by_site import sum_over_sites
    from warehouse import sql

    columns = sum_columns()
    reps = int(exports[0].manifest["reps"])
    parts = []
    for analysis in analyses:
        totals = pooled_totals(analysis, exports)
        sums = sum_over_sites(e.replicates[analysis] for e in exports)
        block = {
            "analysis": pa.array([analysis] * (reps + 1), pa.string()),
            "rep": pa.array(np.arange(-1, reps, dtype=np.int64)),
        }
        for j, c in enumerate(columns):
            block[c] = pa.array(np.concatenate([[totals[c]], sums[:, j]]))
        parts.append(pa.table(block))
    con = sql.connect(threads=1)
    con.register("replicate_sums", pa.concat_tables(parts))
    sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
    con.unregister("replicate_sums")
    return con


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
    analysis: str,
    exports: list[SiteExport],
    quantiles: tuple[float, float],
    source: str,
    data_sha256: str,
    exact: tuple[str, int, int] | None = None,
) -> tuple[list[dict], dict]:
    """The estimates rows (ESTIMATE_COLUMNS: the bootstrap of the exports' scheme, or the `exact` (scheme,
    reps, seed) over per-cluster exports, and delta_method) of one analysis pooled over `exports`, and the
    delta method's (estimate, se) per (unit, metric) for the heterogeneity."""
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

    entries = [e.analyses[analysis] for e in exports]
    totals = pooled_totals(analysis, exports)
    scheme, reps, seed = exact or _bootstrap(exports)
    records = _records(analysis, entries, source, data_sha256)
    if exact is None:
        con = _metrics_connection([analysis], exports)
    else:
        from autheval.sites.clusters import exact_metrics_connection

        con = exact_metrics_connection(analysis, exports, *exact)
    try:
        computed = {
            (r["analysis"], r["unit"], r["metric"]): r
            for r in sql.rows(con, "estimates/intervals", {"lower": quantiles[0], "upper": quantiles[1]})
        }
    finally:
        con.close()
    result = EstimationResult(scheme, reps, seed, quantiles, {analysis: records})  # type: ignore[arg-type]
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
                    "std_error": se,
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


def pool_contrasts(
    exports: list[SiteExport], quantiles: tuple[float, float], source: str, data_sha256: str, family: str
) -> list[dict]:
    """The paired-contrast rows (POOLED_CONTRAST_COLUMNS) of the exports' contrasts pooled over `exports`:
    per contrast and unit, the bootstrap of the pooled replicate sums of both arms (identical clusters,
    identical weights: estimates/paired_contrast.sql, as `compare` forms them, with its p-value floor
    and multiplicity columns over `family`), then the delta method of the difference from the pooled
    moments of (x_n, y_gap of A minus B)."""
    import pyarrow as pa

    from autheval.estimation.analytic import DELTA_METHOD, delta_interval
    from autheval.estimation.estimators import contrast_rows
    from autheval.estimation.multiplicity import ADJUSTED_COLUMNS, add_adjusted_columns, contrast_family

    names = list(exports[0].contrasts)
    if not names:
        return []
    pairs = [
        {"contrast": n, "arm_a": exports[0].contrasts[n]["arm_a"], "arm_b": exports[0].contrasts[n]["arm_b"]}
        for n in names
    ]
    scheme, reps, seed = _bootstrap(exports)
    q = {"lower": quantiles[0], "upper": quantiles[1]}
    support = {n: sum(e.contrasts[n]["changed_clusters"] for e in exports) for n in names}
    con = _metrics_connection(sorted({p[k] for p in pairs for k in ("arm_a", "arm_b")}), exports)
    try:
        con.register("contrast_pairs", pa.Table.from_pylist(pairs))
        rows = contrast_rows(con, pairs, support, q)
        add_adjusted_columns(rows, [contrast_family(family, r["unit"]) for r in rows], quantiles, con)
    finally:
        con.close()
    stamp = {"scheme": scheme, "reps": reps, "seed": seed, "source": source, "data_sha256": data_sha256}
    for row in rows:
        row.update(interval_method=f"bootstrap_{scheme}", **stamp)
    points = {(r["contrast"], r["unit"]): r["difference"] for r in rows}
    for pair in pairs:
        totals = pooled_totals(pair["arm_a"], exports)
        for unit, names_of in TERM_TOTALS.items():
            g, _, c = _chan([e.contrasts[pair["contrast"]]["units"][unit] for e in exports])
            est, sx = points.get((pair["contrast"], unit)), totals[names_of["x_n"]]
            se = None
            if est is not None and sx != 0 and g > 1:
                ss = max(c[1, 1] - 2 * est * c[1, 0] + est * est * c[0, 0], 0.0)  # sum of (D - R X)^2
                se = math.sqrt(g / (g - 1) * ss) / sx
            _, lo, hi = delta_interval(est, se, g, quantiles)
            rows.append(
                {
                    **pair,
                    "unit": unit,
                    "difference": est,
                    "ci_lower": lo,
                    "ci_upper": hi,
                    "excludes_zero": None if lo is None or hi is None else bool(lo > 0 or hi < 0),
                    **dict.fromkeys(ADJUSTED_COLUMNS),
                    **stamp,
                    "interval_method": DELTA_METHOD,
                    "scheme": "",
                    "reps": None,
                    "seed": None,
                }
            )
    return rows


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


def pool(
    exports: list[SiteExport],
    quantiles: tuple[float, float] = (0.025, 0.975),
    exact: tuple[str, int, int] | None = None,
) -> tuple[list[dict], list[dict], dict]:
    """(estimates rows, paired-contrast rows, summary) of the verified, compatible `exports`: per
    analysis (and per contrast) the pooled rows (source 'pooled', data_sha256 naming every export's
    manifest hash) then each site's rows. `exact`: (scheme, reps, seed) of the reference or evaluator
    scheme run over per-cluster exports (autheval.sites.clusters); the paired contrasts stay on the
    exports' replicate sums."""
    exports = sorted(exports, key=lambda e: e.site)
    scheme, reps, seed = exact or _bootstrap(exports)
    rows: list[dict] = []
    summary: dict = {
        "command": "pool",
        "scheme": scheme,
        "seed": seed,
        "reps": reps,
        "quantiles": list(quantiles),
        "software": exports[0].manifest["software"],
        "exports": [
            {
                "site": e.site,
                "manifest_sha256": e.manifest_sha256,
                "inputs": {i["analysis"]: i["sha256"] for i in e.manifest["inputs"]},
                "signed_by": e.signer,
            }
            for e in exports
        ],
        "analyses": {},
    }
    with np.errstate(all="ignore"):  # an overflow is refused by _check_finite, in one line, not warned of
        for analysis in sorted({a for e in exports for a in e.analyses}):
            _pool_one(analysis, exports, quantiles, rows, summary, exact)
        names = ";".join(f"{e.site}={e.manifest_sha256}" for e in exports)
        contrasts = pool_contrasts(exports, quantiles, "pooled", names, DEFAULT_CONTRAST_FAMILY)
        for e in exports:
            family = f"{DEFAULT_CONTRAST_FAMILY} of site {e.site}"
            contrasts += pool_contrasts([e], quantiles, f"site:{e.site}", e.manifest_sha256, family)
        _check_finite("paired contrasts", contrasts, [])
    summary["contrasts"] = {
        f"{r['interval_method']}/{r['contrast']}/{r['unit']}": [r["difference"], r["ci_lower"], r["ci_upper"]]
        for r in contrasts
        if r["source"] == "pooled"
    }
    return rows, contrasts, summary


def _pool_one(
    analysis: str, exports: list[SiteExport], quantiles: tuple[float, float], rows: list, summary: dict, exact=None
):
    """Append the pooled and per-site rows of one analysis to `rows` and its entry to `summary`."""
    members = [e for e in exports if analysis in e.analyses]
    names = ";".join(f"{e.site}={e.manifest_sha256}" for e in members)
    pooled, _ = pool_analysis(analysis, members, quantiles, "pooled", names, exact)
    per_site = {}
    site_rows = []
    for e in members:
        r, kept = pool_analysis(analysis, [e], quantiles, f"site:{e.site}", e.manifest_sha256, exact)
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
