"""Monitoring from site exports: a site's monitor part, and the hub's monitor of the pooled parts.

The lake's monitor (autheval.monitoring.monitor) decides every look from what each period adds to each
slice (sql/recurring/monitor_period_sums.sql: clusters first seen, cases, the counts that decide the
record level; sql/recurring/monitor_period_moments.sql: per ratio the sums over clusters of the change in
Y_c, X_c and the centred moments, with their centre K) and from each look's validity and fixed-sample
interval. Those are sums over clusters, and two sites share no cluster, so:

* a site (`site export --monitor DIR --protocol P`) reads its logs as the lake lands them
  (autheval.monitoring.landing.read_landed, then the lake's rule for overlapping files and corrections),
  forms its slices (each model version, and the site over its model versions) with the lake's SQL, and
  exports per slice and period those sums, the record rule a look breaks (its column and rule, never the
  example row), the fixed-sample interval (the evaluator scheme's, as the lake's) and its case-mix counts;
  and per landed file the periods it holds (its content key: the looks' data hashes);
* the hub (`pool --protocol P`) lays each site's slices out as the lake's slices, adds the sites'
  site-over-model-versions parts into the pooled slice (`all`), and decides with the same SQL
  (decide_looks): the looks, confidence sequences, Holm over the declared family, the statuses, the case
  mix. The pooled slice's parts are centred on their own K; sql/recurring/monitor_look_ratios.sql
  re-centres them on one before adding.

What differs from one lake: the pooled slice has no fixed-sample bootstrap interval (no rows to resample:
its rows say so), and a reason that names a broken record rule names no example row.

Disclosure control: a period of a slice is exported when the clusters with a case in it (and those with a
changed case) since the slice's last exported period reach the export's minimum counts; otherwise it is
suppressed with the reason and its increments are carried into the next exported period (their sum is
exported there). A slice's site-over-model-versions period is exported only where every model version's
slice is exported or has nothing pending (no difference of the two reveals a suppressed one). Periods after
the last exported one are withheld: the slice's sums and centre are formed as of that period. The hub
keeps a suppressed look's row (same look and period) undecided (`insufficient`, no estimate, no cluster
count) with the reason, and decides every later look from the carried sums.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autheval.columns import schema, typed
from autheval.errors import RecordError
from autheval.sites.fields import Fields

MONITOR_FORMAT = "autheval-site-monitor/1"
SUM_FIELDS = ("new_clusters", "cases", "changed", "changed_local", "local_given", "global_given", "executed")
WINDOW_FIELDS = ("clusters", "changed_clusters")  # distinct clusters with a case (a changed case) in the window
MOMENT_FIELDS = ("d_y", "d_x", "d_ee", "d_xe", "d_xx")
UNITS = ("image_weighted", "cluster_equal")
RATIOS = tuple(f"{u}/{m}" for u in UNITS for m in ("J", "intervention_rate", "J_auth", "Delta_authority", "delta"))
CASE_MIX_FIELDS = ("period", "look", "dimension", "category", "count")
POOLED = "all"
POOLED_NO_INTERVAL = (
    "the pooled slice of site exports has no rows to resample (a fixed-sample bootstrap needs the clusters; "
    "the confidence sequence does not)"
)
MAX_ENTRIES = 1_000_000
# record rules a pooled slice can break across sites although each site's slice keeps them (a rule of
# every row or none): (look-sums count, the count it must be 0 or equal to, column, rule)
ALL_OR_NONE = (
    ("n_executed", "n_cases", "executed_action", "is given on some sites' rows and not on others (every row or none)"),
    (
        "n_changed_local",
        "n_changed",
        "utility_proposed_local",
        "is given on some sites' changed rows and not on others (every changed row or none)",
    ),
    (
        "n_global",
        "n_cases",
        "utility_proposed_global",
        "is given on some sites' rows and not on others (every row or none)",
    ),
)


# --- the site ---------------------------------------------------------------------------------------------


def read_site_logs(folder: Path, site: str, flag: str = "--monitor") -> tuple[pa.Table, list[dict]]:
    """Every log of `folder` (CSV or Parquet, name order) read as the lake lands it, the lake's landing
    rule kept file by file (sql/recurring/landed_overlap.sql: a case landed twice without a declared
    correction, a correction naming no earlier file or one already superseded), and the rows that count
    (the lake's own view of them, autheval.monitoring.landing.landed_view); and each log's name and SHA-256.
    One line on any refusal."""
    from autheval.io import file_sha256
    from autheval.monitoring.landing import (
        LANDED_TABLE,
        LandingChanged,
        content_key,
        is_log_name,  # the watcher's rule for a log's name
        landed_files,
        landed_view,
        read_landed,
        with_deployment_columns,
    )
    from warehouse.sql import connect, one

    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise RecordError(flag, None, f"{folder} is not a folder of the site's logs")
    paths = landed_files(folder)
    skipped = sorted({p for p in folder.iterdir() if is_log_name(p.name)} - set(paths))
    if skipped:  # a FIFO, a device or a folder named as a log: the lake's watcher would never land it
        raise RecordError(flag, None, f"{skipped[0]} is named as a log but is not a plain file")
    if not paths:
        raise RecordError(flag, None, f"{folder} holds no log (CSV or Parquet)")
    tables: list[pa.Table] = []
    inputs: list[dict] = []
    keys: dict[str, str] = {}
    con = connect(threads=1)
    for path in paths:
        if path.is_symlink():
            raise RecordError(flag, None, f"{path} is a link; the site's logs are read as plain files only")
        sha256 = file_sha256(path)
        key = content_key(sha256)
        if key in keys:
            raise RecordError(flag, None, f"{path} holds the same bytes as {keys[key]}: a log is read once")
        try:
            _, table = read_landed(path, sha256=sha256)
        except LandingChanged as err:
            raise RecordError(str(path), None, str(err)) from None
        table = with_deployment_columns(table)
        other = pc.unique(pc.filter(table.column("site"), pc.not_equal(table.column("site"), site))).to_pylist()
        if other:
            raise RecordError(
                str(path),
                "site",
                f"must name the exporting site {site!r} on every row (the monitor reads a log's site from it)",
                f"got {other[0]!r}",
            )
        before = pa.concat_tables(tables, promote_options="permissive") if tables else None
        _check_overlap(con, before, table, str(path), one)
        keys[key] = path.name
        tables.append(table)
        inputs.append({"file": path.name, "sha256": sha256})
    landed_view(con, pa.concat_tables(tables, promote_options="permissive"))
    return con.table(LANDED_TABLE).arrow().read_all(), inputs


def _check_overlap(con, before: pa.Table | None, table: pa.Table, source: str, one) -> None:
    """The lake's landing rule for one more file (sql/recurring/landed_overlap.sql), in one line."""
    columns = ("landed_key", "landed_file", "site", "period", "case_id", "supersedes")
    if before is None:
        before = pa.table({c: pa.array([], pa.string()) for c in columns})
    con.register("landed_before", before.select(list(columns)))
    con.register("landed_new", table.select(["site", "period", "case_id"]))
    replaced = table.column("supersedes")[0].as_py() if table.num_rows else None
    found = one(con, "recurring/landed_overlap", {"supersedes": replaced})
    con.unregister("landed_before")
    con.unregister("landed_new")
    if found["broken"] == "supersedes":
        raise RecordError(source, "supersedes", "names no earlier log of the folder (its content key)", replaced)
    if found["broken"] == "superseded":
        raise RecordError(source, "supersedes", f"names a log already superseded by {found['superseded_by']}", replaced)
    if found["broken"] == "case_id":
        raise RecordError(
            source,
            "case_id",
            f"already in {found['landed_file']} (site, period, case_id): a corrected log declares a `supersedes` "
            "column naming that log's content key, else its cases count twice",
            f"period {found['period']!r}; {found['clashes']} cases in all",
        )


def _windows(periods: pa.Table, slices, min_clusters: int, min_changed: int) -> dict[int, dict[str, tuple]]:
    """slice -> period -> (the period its increments are exported at, None where withheld; why it is
    suppressed, None where exported at itself; the clusters with a case and with a changed case in the
    window it closes). A slice over model versions closes a window only where no model version's slice
    has a suppressed period pending."""
    clusters: dict[tuple[int, str], set] = {}
    changed: dict[tuple[int, str], set] = {}
    columns = [periods.column(c).to_pylist() for c in ("slice", "site", "cluster_id", "period", "ch_period")]
    for index, site, cluster, period, ch in zip(*columns):
        clusters.setdefault((index, period), set()).add((site, cluster))
        if ch:
            changed.setdefault((index, period), set()).add((site, cluster))
    cells = [i for i, s in enumerate(slices) if s.model_version != POOLED]
    out: dict[int, dict[str, tuple]] = {}

    def pending(index: int, period: str) -> bool:
        return any(p <= period and (w[0] is None or w[0] > period) for p, w in out[index].items())

    for index in cells + [i for i in range(len(slices)) if i not in cells]:
        rows: dict[str, tuple] = {}
        short: dict[str, str] = {}
        window: list[str] = []
        seen: set = set()
        seen_changed: set = set()
        for _, period in slices[index].looks:
            window.append(period)
            seen |= clusters.get((index, period), set())
            seen_changed |= changed.get((index, period), set())
            if len(seen) < min_clusters:
                short[period] = f"fewer than {min_clusters} clusters with a case (the declared --min-clusters)"
            elif len(seen_changed) < min_changed:
                short[period] = (
                    f"fewer than {min_changed} clusters with a changed case (the declared --min-changed-clusters)"
                )
            elif index not in cells and any(pending(c, period) for c in cells):
                short[period] = "a model version's period to it is suppressed (the difference would show it)"
            else:
                for p in window:
                    reason = None if p == period else f"{short[p]}; carried into {period}"
                    rows[p] = (period, reason, len(seen), len(seen_changed))
                window, seen, seen_changed = [], set(), set()
        for p in window:
            rows[p] = (None, f"{short[p]}; no later period reaches the minimum: withheld", None, None)
        out[index] = rows
    return out


def _to_cutoffs(periods: pa.Table, windows: dict[int, dict[str, tuple]]) -> pa.Table:
    """The cluster periods of each slice to its last exported period (none for a slice with none): a
    withheld period enters no exported number, the slice's centre K included."""
    last = {i: max((w[0] for w in rows.values() if w[0] is not None), default=None) for i, rows in windows.items()}
    keep = [
        last[i] is not None and period <= last[i]
        for i, period in zip(periods.column("slice").to_pylist(), periods.column("period").to_pylist())
    ]
    return periods.filter(pa.array(keep, pa.bool_()))


def _table_rows(con, name: str) -> list[dict]:
    """Every row of the table `name` on `con`, as dicts."""
    relation = con.table(name)
    return [dict(zip(relation.columns, row)) for row in relation.fetchall()]


def _added(values: list) -> float | None:
    """The sum of the numbers in order (None: a sum over no cluster), one at a time."""
    numbers = [v for v in values if v is not None]
    if not numbers:
        return None
    total = numbers[0]
    for v in numbers[1:]:
        total += v
    if not math.isfinite(total):
        raise RecordError("--monitor", None, "a monitored sum overflows to infinity; nothing is exported")
    return total


def monitor_part(
    folder: Path, site: str, protocol, reps: int, min_clusters: int, min_changed_clusters: int
) -> tuple[dict, list[dict]]:
    """(monitor.json's content, each log's name and SHA-256) of the site's logs in `folder` under the
    protocol (its baseline periods: the case mix): per slice (each model version; `all`: the site over
    them) and period what the period adds, its record rule broken, its fixed-sample interval of `reps`
    replicates, or why it is suppressed; the case-mix counts and which landed file holds which periods."""
    from autheval.monitoring.landing import LANDED_TABLE
    from autheval.monitoring.monitor import landed_statistics, look_slices, period_statistics, register_slices
    from warehouse.sql import connect, run

    landed, inputs = read_site_logs(folder, site)
    con = connect(threads=1)
    con.register(LANDED_TABLE, landed)
    slices = [replace(s, alias_of=None) for s in look_slices(con) if s.site != POOLED]
    register_slices(con, slices)
    periods = run(con, "recurring/monitor_cluster_periods")
    windows = _windows(periods, slices, min_clusters, min_changed_clusters)
    con.register("monitor_cluster_periods", _to_cutoffs(periods, windows))
    period_statistics(con)
    stats = landed_statistics(con, slices, reps)
    sums = {(r["slice"], r["period"]): r for r in _table_rows(con, "monitor_period_sums")}
    moments: dict[tuple[int, str, str], dict] = {}
    centres: dict[int, dict[str, float]] = {}
    for r in _table_rows(con, "monitor_period_moments"):
        ratio = f"{r['unit']}/{r['metric']}"
        moments[(r["slice"], ratio, r["period"])] = r
        centres.setdefault(r["slice"], {})[ratio] = r["k"]
    cells = []
    for index, piece in enumerate(slices):
        entries = []
        for look, period in piece.looks:
            end, reason, n_clusters, n_changed = windows[index][period]
            if end != period:
                entries.append({"period": period, "suppressed": True, "reason": reason})
                continue
            window = [p for p, w in windows[index].items() if w[0] == period]
            err = stats.errors.get((index, look))
            entries.append(
                {
                    "period": period,
                    "suppressed": False,
                    "reason": None,
                    "sums": {f: sum(int(sums[(index, p)][f]) for p in window) for f in SUM_FIELDS},
                    "clusters": n_clusters,
                    "changed_clusters": n_changed,
                    "moments": {
                        ratio: [_added([moments[(index, ratio, p)][f] for p in window]) for f in MOMENT_FIELDS]
                        for ratio in RATIOS
                    },
                    "failed": None if err is None else {"column": err.column, "rule": err.rule},
                    "intervals": _intervals(stats.intervals, f"{index}/{look}"),
                }
            )
        cells.append({"model_version": piece.model_version, "centres": centres.get(index, {}), "periods": entries})
    pooled = next(i for i, s in enumerate(slices) if s.model_version == POOLED)
    files = landed.group_by(["landed_key", "model_version", "period"]).aggregate([])
    part = {
        "format": MONITOR_FORMAT,
        "site": site,
        "protocol": {"version": protocol.version, "sha256": protocol.sha256},
        "reps": int(reps),
        "files": sorted([list(r.values()) for r in files.to_pylist()]),
        "cells": cells,
        "no_interval": next(iter(stats.no_interval.values()), None),
        "case_mix": _case_mix(con, protocol, slices[pooled], windows[pooled]),
    }
    return part, inputs


def _intervals(found: dict, label: str) -> dict[str, list]:
    """The fixed-sample interval of each monitored ratio of one look, where formed (NaN: null)."""
    out = {}
    for ratio in RATIOS:
        unit, metric = ratio.split("/")
        ends = found.get((label, unit, metric))
        if ends is not None:
            out[ratio] = [None if v is None or not math.isfinite(v) else float(v) for v in ends]
    return out


def _case_mix(con, protocol, piece, windows: dict[str, tuple]) -> list[list]:
    """The site's case-mix counts (sql/recurring/monitor_case_mix_counts.sql), a suppressed period's
    carried into the period its window is exported at, a withheld period's left out."""
    from warehouse.sql import rows

    look_of = {period: look for look, period in piece.looks}
    found: dict[tuple, int] = {}
    for r in rows(con, "recurring/monitor_case_mix_counts", {"baseline_periods": protocol.baseline_periods}):
        end = windows[r["period"]][0]
        if end is not None:
            key = (end, look_of[end], r["dimension"], r["category"])
            found[key] = found.get(key, 0) + int(r["count"])
    return [[*key, count] for key, count in sorted(found.items())]


# --- the hub ----------------------------------------------------------------------------------------------

HEX20 = "0123456789abcdef"


def check_monitor(part: dict, path: Path, manifest: dict) -> dict:
    """A signed monitor.json, every field checked for type, shape and range and against the manifest
    (site, protocol, replicates, minimum counts); one line naming the file and the field. Returns it with
    `cells` as {model_version: {"centres": ..., "periods": {period: entry}}}."""
    from autheval.vocabulary import name_problem

    f = Fields(path)
    declared = manifest["monitor"]
    if f.text(part, "format") != MONITOR_FORMAT:
        raise f.fail("format", f"must be {MONITOR_FORMAT}", part["format"])
    if f.text(part, "site") != manifest["site"]:
        raise f.fail("site", f"names another site than its manifest ({manifest['site']!r})", part["site"])
    protocol = f.obj(part, "protocol")
    if (f.text(protocol, "version", "protocol"), f.text(protocol, "sha256", "protocol")) != (
        declared["protocol_version"],
        declared["protocol_sha256"],
    ):
        raise f.fail("protocol", "names another protocol than the manifest's monitor entry")
    if f.count(part, "reps") != declared["reps"]:
        raise f.fail("reps", f"must equal the manifest's monitor reps {declared['reps']}", part["reps"])
    periods_of: dict[str, set[str]] = {POOLED: set()}
    files = []
    for i, entry in enumerate(f.items(part, "files", high=MAX_ENTRIES)):
        ok = (
            isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, str) and 0 < len(v) <= 256 for v in entry)
        )
        if not ok or len(entry[0]) != 20 or any(c not in HEX20 for c in entry[0]) or name_problem(entry[1]):
            raise f.fail(f"files[{i}]", "must be [content key (20 hex digits), model version, period]", entry)
        files.append(tuple(entry))
        periods_of.setdefault(entry[1], set()).add(entry[2])
        periods_of[POOLED].add(entry[2])
    if not files or len(set(files)) != len(files):
        raise f.fail("files", "must name each landed file's model version and period once, at least one")
    cells: dict[str, dict] = {}
    for i, cell in enumerate(f.items(part, "cells", high=10_000)):
        at = f"cells[{i}]"
        if not isinstance(cell, dict):
            raise f.fail(at, "must be an object", cell)
        version = f.text(cell, "model_version", at)
        if version in cells or version not in periods_of:
            raise f.fail(f"{at}.model_version", "must name a model version of the files (or all) once", version)
        cells[version] = _check_cell(f, cell, at, sorted(periods_of[version]), manifest)
    if set(cells) != set(periods_of):
        raise f.fail("cells", f"must hold one cell per model version of the files and one for {POOLED!r}")
    value, _ = f.get(part, "no_interval", "")
    if value is not None:
        f.text(part, "no_interval")
    looks = {p: k for k, p in enumerate(sorted(periods_of[POOLED]), start=1)}
    case_mix = []
    for i, row in enumerate(f.items(part, "case_mix", high=MAX_ENTRIES)):
        ok = isinstance(row, list) and len(row) == 5 and all(isinstance(v, str) and v for v in row[2:4])
        if not ok or row[0] not in looks or row[1] != looks[row[0]] or not (isinstance(row[4], int) and row[4] > 0):
            raise f.fail(
                f"case_mix[{i}]", "must be [a period of the files, its look, dimension, category, clusters]", row
            )
        case_mix.append(dict(zip(CASE_MIX_FIELDS, row)))
    return {**part, "cells": cells, "files": files, "case_mix": case_mix}


def _check_cell(f: Fields, cell: dict, at: str, periods: list[str], manifest: dict) -> dict:
    entries = f.items(cell, "periods", at, high=MAX_ENTRIES)
    got = [e.get("period") if isinstance(e, dict) else None for e in entries]
    if got != periods:
        raise f.fail(f"{at}.periods", "must list the cell's periods of the files, in order, once each")
    centres = f.obj(cell, "centres", at)
    out: dict[str, dict] = {}
    exported = False
    for j, entry in enumerate(entries):
        where = f"{at}.periods[{j}]"
        if f.flag(entry, "suppressed", where):
            f.text(entry, "reason", where)
            out[entry["period"]] = {"suppressed": True, "reason": entry["reason"]}
            continue
        exported = True
        sums = f.obj(entry, "sums", where)
        if set(sums) != set(SUM_FIELDS):
            raise f.fail(f"{where}.sums", f"must name exactly {', '.join(SUM_FIELDS)}")
        counted = {k: f.count(sums, k, f"{where}.sums") for k in SUM_FIELDS}
        g = f.count(entry, "clusters", where)
        changed = f.count(entry, "changed_clusters", where, high=g)
        if g < manifest["min_clusters"] or changed < manifest["min_changed_clusters"]:
            raise f.fail(where, "is below the manifest's minimum counts but is not suppressed")
        if counted["new_clusters"] > g or counted["changed"] > counted["cases"] or counted["cases"] < g:
            raise f.fail(f"{where}.sums", "is inconsistent with the period's clusters")
        moments = f.obj(entry, "moments", where)
        if set(moments) != set(RATIOS):
            raise f.fail(f"{where}.moments", f"must name exactly {', '.join(RATIOS)}")
        checked = {r: f.numbers(moments[r], f"{where}.moments.{r}", len(MOMENT_FIELDS)) for r in RATIOS}
        failed, field = f.get(entry, "failed", where)
        if failed is not None:
            if not isinstance(failed, dict) or set(failed) != {"column", "rule"}:
                raise f.fail(field, "must be null or an object of column and rule", failed)
            if failed["column"] is not None:
                f.text(failed, "column", field)
            f.text(failed, "rule", field)
        intervals = f.obj(entry, "intervals", where)
        if not set(intervals) <= set(RATIOS):
            raise f.fail(f"{where}.intervals", f"may name only {', '.join(RATIOS)}")
        ends = {r: f.numbers(v, f"{where}.intervals.{r}", 2) for r, v in intervals.items()}
        out[entry["period"]] = {
            "suppressed": False,
            "sums": counted,
            "clusters": g,
            "changed_clusters": changed,
            "moments": checked,
            "failed": failed,
            "intervals": ends,
        }
    if exported and set(centres) != set(RATIOS):
        raise f.fail(f"{at}.centres", f"must name exactly {', '.join(RATIOS)}")
    return {"centres": {r: f.number(centres, r, f"{at}.centres") for r in centres}, "periods": out}


def check_monitors(exports, protocol, flag: str = "--export") -> None:
    """Every export holds a monitor part made under the hub's protocol (its SHA-256); one line naming the
    export (the replicates are the export's, the same at every site: autheval.sites.pool.check_exports)."""
    for e in exports:
        declared = e.manifest.get("monitor")
        if declared is None:
            raise RecordError(
                flag, None, f"{e.folder} holds no monitor part (site export --monitor); --protocol pools them"
            )
        if declared["protocol_sha256"] != protocol.sha256:
            raise RecordError(
                flag,
                None,
                f"{e.folder}: its monitor part was made under protocol {declared['protocol_version']!r} (SHA-256 "
                f"{declared['protocol_sha256'][:12]}...), not the hub's --protocol {protocol.version!r} "
                f"({protocol.sha256[:12]}...)",
            )


def _complete(cell: dict, period: str) -> bool:
    """The cell's sums to `period` are all exported: its latest period to it is not suppressed."""
    before = [p for p in cell["periods"] if p <= period]
    return not before or not cell["periods"][max(before)]["suppressed"]


def _latest(cell: dict, period: str) -> dict | None:
    before = [p for p in cell["periods"] if p <= period]
    return cell["periods"][max(before)] if before else None


def pooled_monitor(exports, protocol, decisions=None, run_id: str | None = None, snapshot: int | None = None):
    """(Monitoring, Decided) of the exports' monitor parts under `protocol`: the monitor and case-mix
    tables the lake's monitor of all the sites' logs gives (autheval.monitoring.monitor.decide_looks on
    the sites' period sums), and the decision record with the table as served: a first run's (`pool`),
    or a hub lake's record `decisions` with this run's first decisions added (run `run_id`, `snapshot`)."""
    import hashlib

    from autheval.monitoring.decisions import record_decisions
    from autheval.monitoring.landing import LANDED_TABLE
    from autheval.monitoring.monitor import (
        LookStatistics,
        decide_looks,
        look_slices,
        pooling_reason,
        register_slices,
    )
    from autheval.records.schema import FULL, RecordSet
    from warehouse.sql import connect, rows

    parts = {e.site: e.monitor for e in sorted(exports, key=lambda e: e.site)}
    con = connect(threads=1)
    files = [(site, v, p, key) for site, part in parts.items() for key, v, p in part["files"]]
    con.register(
        LANDED_TABLE,
        pa.table({c: [r[i] for r in files] for i, c in enumerate(("site", "model_version", "period", "landed_key"))}),
    )
    slices = look_slices(con)
    register_slices(con, slices)
    members: dict[int, list[tuple[str, dict]]] = {}
    sums_rows, moment_rows = [], []
    for index, piece in enumerate(slices):
        if piece.alias_of is not None:
            continue
        if piece.site == POOLED:
            members[index] = [(site, part["cells"][POOLED]) for site, part in parts.items()]
        else:
            members[index] = [(piece.site, parts[piece.site]["cells"][piece.model_version])]
        for _, cell in members[index]:
            for period, entry in cell["periods"].items():
                if entry["suppressed"]:  # the look is still numbered; its sums come with a later period
                    sums_rows.append({"slice": index, "period": period, **dict.fromkeys(SUM_FIELDS, 0)})
                    continue
                sums_rows.append({"slice": index, "period": period, **entry["sums"]})
                for ratio, values in entry["moments"].items():
                    unit, metric = ratio.split("/")
                    row = {"slice": index, "unit": unit, "metric": metric, "period": period}
                    moment_rows.append({**row, "k": cell["centres"][ratio], **dict(zip(MOMENT_FIELDS, values))})
    con.register("monitor_period_sums", pa.Table.from_pylist(sums_rows, schema=_SUMS_SCHEMA))
    con.register("monitor_period_moments", pa.Table.from_pylist(moment_rows, schema=_MOMENTS_SCHEMA))
    looks = {(r["slice"], r["look"]): r for r in rows(con, "recurring/monitor_look_sums")}
    whole, failed, errors, withheld, intervals, no_interval = {}, {}, {}, set(), {}, {}
    for index, cells in members.items():
        piece = slices[index]
        source = f"lake:{LANDED_TABLE}/{piece.site}/{piece.model_version}"
        for site, part in parts.items():
            if part["no_interval"] and any(s == site for s, _ in cells):
                no_interval[index] = part["no_interval"]
        if piece.site == POOLED:
            no_interval[index] = POOLED_NO_INTERVAL
        for look, period in piece.looks:
            short = [site for site, cell in cells if not _complete(cell, period)]
            if short:
                withheld.add((index, look))
                reason = "; ".join((_latest(cell, period) or {})["reason"] for site, cell in cells if site in short)
                failed[(index, look)] = (
                    f"not decided: {' and '.join(short)} suppressed the period or one before it in its export "
                    f"({reason})"
                )
                continue
            broken = [(_latest(cell, period) or {}).get("failed") for _, cell in cells]
            rule = next((b for b in broken if b), None)
            if rule is None and piece.site == POOLED:
                counts = looks[(index, look)]
                rule = next(
                    ({"column": c, "rule": r} for n, total, c, r in ALL_OR_NONE if 0 < counts[n] < counts[total]), None
                )
            if rule is not None:
                errors[(index, look)] = RecordError(source, rule["column"], rule["rule"])
                failed[(index, look)] = pooling_reason(piece, period, errors[(index, look)])
                continue
            whole[(index, look)] = RecordSet(
                analysis=f"{index}/{look}",
                source=source,
                schema="log",
                level=FULL,
                has_local=False,
                has_global=False,
                n_cases=0,
                n_clusters=0,
                n_changed=0,
                data_sha256="",
                rows=None,
            )
            if piece.site != POOLED:
                for ratio, ends in cells[0][1]["periods"][period]["intervals"].items():
                    unit, metric = ratio.split("/")
                    intervals[(f"{index}/{look}", unit, metric)] = tuple(ends)
    case_mix = [{"site": site, **row} for site, part in parts.items() for row in part["case_mix"]]
    reps = next(iter(parts.values()))["reps"]
    stats = LookStatistics(
        slices, whole, failed, errors, intervals, no_interval, reps, withheld, pa.Table.from_pylist(case_mix, _CASE_MIX)
    )
    monitoring = decide_looks(con, stats, protocol)
    names = ";".join(f"{e.site}={e.manifest_sha256}" for e in sorted(exports, key=lambda e: e.site))
    run_id = run_id or "pool-" + hashlib.sha256(names.encode()).hexdigest()[:20]
    return monitoring, record_decisions(decisions, monitoring.table, run_id, snapshot)


_SUMS_SCHEMA = schema(("slice", pa.int64()), "period", *typed(pa.int64(), SUM_FIELDS))
_MOMENTS_SCHEMA = schema(("slice", pa.int64()), "unit metric period", *typed(pa.float64(), ("k", *MOMENT_FIELDS)))
_CASE_MIX = schema("site period look dimension category count")
