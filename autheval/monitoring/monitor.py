"""Monitoring a deployment: every site x model version's gap, watched look after look (period after
period) with anytime-valid confidence sequences, decided against a declared acceptance protocol
(autheval.monitoring.protocol), and the case mix watched beside it.

Looking at a fixed-sample 95% interval every month and acting when it excludes a bound is repeated
peeking: over two years of monthly looks the chance of a false alarm is several times 5%. A confidence
sequence is valid at every look at once, however many there are. Here it is the asymptotic confidence
sequence of Waudby-Smith, Arnold, Wu, Howard and Ramdas (time-uniform central limit theory, the
two-sided Gaussian-mixture boundary) applied to the delta-method linearisation of each ratio metric
over lesion clusters, computed in SQL from the per-cluster sums of sql/records/cluster_stats.sql and
sql/estimates/delta_method.sql (sql/recurring/monitor_cs.sql), its boundary tuned to the protocol's horizon.

Each (site, model_version, rule) gets an anytime-valid p-value against its bounds (the confidence
sequence's radius inverted in alpha, sql/recurring/monitor_cs_pvalues.sql; the running minimum over looks), the
multiplicity correction over sites x model versions x rules (Holm by default, on those p-values, per
calendar period: sql/recurring/monitor_alpha_adjusted.sql), and, at each look, the status of the confidence
sequence drawn at its adjusted level (sql/recurring/monitor_status.sql): `alert` wholly outside the bounds,
`pass` wholly inside, `insufficient` otherwise or below the protocol's minimum clusters, with the
reason in words. The fixed-sample bootstrap interval (the evaluator scheme, as the trend uses) stays
beside it. The case mix (sql/recurring/monitor_case_mix.sql, one observation per lesion cluster) is tested against
a declared reference by the sequential multinomial test of Lindon and Malek, or against the site's
first periods (an estimated baseline) by a universal-inference e-process that allows for the
baseline's own sampling error.

No Dagster here: the lake's `monitor` asset and `autheval monitor` call these. docs/monitoring.md is
the tables' contract.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace

import pyarrow as pa

from autheval.columns import schema
from autheval.errors import RecordError
from autheval.estimation.estimators import DEFAULT_REPS, DEFAULT_SEEDS, availability, estimate
from autheval.estimation.provenance import Provenance, stamp
from autheval.io import table_sha256
from autheval.monitoring.landing import LANDED_TABLE, TREND_SCHEME, landed_view
from autheval.monitoring.protocol import CASE_MIX_DIMENSIONS, Protocol, Rule
from autheval.records.datasets import StoredFiles
from autheval.records.read import records_from_table, records_in_place
from autheval.records.schema import FULL, PROPOSAL_ONLY, ROLE_SEPARATED, RecordSet
from autheval.vocabulary import ACTIONS, RISK_LEVELS
from warehouse.sql import connect, drop_view, fill, load_sql, rows, run, to_table

MECHANISM = "landed"  # the proposals of a landed log: the deployed model its model_version names
INTERVAL_METHOD = "confidence_sequence"
STATUSES = ("alert", "pass", "insufficient")
ALERT_ID_LENGTH = 20  # hex digits of the SHA-256 that name an alert

MONITOR_SCHEMA = schema(
    "site model_version mechanism metric unit period look n_clusters estimate cs_lower cs_upper ci_lower ci_upper",
    "lower upper status reason alpha alpha_adjusted p_value p_running family_size multiplicity horizon_clusters",
    "min_clusters",
    "interval_method ci_method protocol_version protocol_sha256 data_sha256 rule_version rule_sha256 scheme seed",
    "reps engine software_version",
)

CASE_MIX_SCHEMA = schema(
    "site period look dimension category count baseline_share share bayes_factor p_value shifted reason alpha",
    "protocol_version protocol_sha256 data_sha256",
)


def empty_monitor() -> pa.Table:
    """The monitor table before anything has landed: no rows, its columns."""
    return MONITOR_SCHEMA.empty_table()


def empty_case_mix() -> pa.Table:
    """The monitor_case_mix table before anything has landed: no rows, its columns."""
    return CASE_MIX_SCHEMA.empty_table()


# --- the confidence sequence: SQL over many analyses at once -----------------------------------------


def rho2_for_horizon(alpha: float, horizon_clusters: int) -> float:
    """rho^2 of the Gaussian-mixture boundary that makes the confidence sequence at level `alpha`
    (about) tightest at t = `horizon_clusters` (Waudby-Smith et al.):
    rho^2 = (-2 ln alpha + ln(-2 ln alpha + 1)) / t_star."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1) (got {alpha!r})")
    if horizon_clusters < 1:
        raise ValueError(f"horizon_clusters must be at least 1 (got {horizon_clusters!r})")
    log_term = -2.0 * math.log(alpha)
    return (log_term + math.log(log_term + 1.0)) / float(horizon_clusters)


def confidence_sequences(
    con, cluster_stats_table: str, alpha: float, horizon_clusters: int, bounds: pa.Table | None = None
) -> pa.Table:
    """The confidence sequence of every monitored metric in both units for every analysis of
    `cluster_stats_table` (a table on `con` in sql/records/cluster_stats.sql's layout: one row per analysis and
    cluster; an analysis is one look), at level `alpha`, tuned to `horizon_clusters`: analysis, unit,
    metric, estimate, sigma, n_clusters, rho2, alpha, cs_lower, cs_upper. With `bounds` (rule, unit,
    metric, lower, upper, and optionally analysis; without it every analysis is held to every bound):
    one row per analysis and rule with the bounds and the anytime-valid `p_value` against them.
    Everything is set-based SQL: one pass over the cluster rows whatever the number of analyses."""
    if cluster_stats_table != "cluster_stats":
        con.execute(fill("recurring/monitor_cluster_stats_view", identifiers={"table": cluster_stats_table}))
    to_table(con, "monitor_delta_method", "estimates/delta_method", {"z_lower": 0.0, "z_upper": 0.0})
    return sequences_from_delta_method(con, alpha, horizon_clusters, bounds)


def sequences_from_delta_method(con, alpha: float, horizon_clusters: int, bounds: pa.Table | None) -> pa.Table:
    """confidence_sequences from the ratios and standard errors in `monitor_delta_method` on `con`
    (sql/estimates/delta_method.sql's layout)."""
    level = {"alpha": float(alpha), "rho2": rho2_for_horizon(alpha, horizon_clusters)}
    if bounds is None:
        return run(con, "recurring/monitor_cs", level)
    to_table(con, "monitor_cs", "recurring/monitor_cs", level)
    if "analysis" not in bounds.column_names:
        con.register("cs_bounds_any", bounds)
        bounds = run(con, "recurring/monitor_bounds_every_analysis")
        con.unregister("cs_bounds_any")
    con.register("cs_bounds", bounds)
    try:
        return run(con, "recurring/monitor_cs_pvalues")
    finally:
        con.unregister("cs_bounds")


def adjusted_levels(con, hypothesis_looks: pa.Table, method: str, family_size: int | None = None) -> pa.Table:
    """Per hypothesis and calendar period, the level it is decided at after the correction `method`
    (holm, bonferroni, none) over a family fixed for every period: `family_size` hypotheses (the
    protocol's declared family), or every hypothesis of `hypothesis_looks` where that is more or none is
    declared; one without data by a period counts with p = 1 (sql/recurring/monitor_alpha_adjusted.sql).
    `hypothesis_looks`: hypothesis, look, period, p_value, alpha, tested."""
    con.register("monitor_hypothesis_looks", hypothesis_looks)
    try:
        return run(con, "recurring/monitor_alpha_adjusted", {"method": method, "family_size": family_size})
    finally:
        con.unregister("monitor_hypothesis_looks")


# --- the monitor table --------------------------------------------------------------------------------


@dataclass
class Monitoring:
    """The `monitor` table, the `monitor_case_mix` table, and one dict per alert in force."""

    table: pa.Table
    case_mix: pa.Table
    alerts: list[dict] = field(default_factory=list)


@dataclass
class LookSlice:
    """A monitored slice (a site x model version, a site over its model versions, or every site) and its
    looks."""

    site: str
    model_version: str
    cells: int
    looks: list[tuple[int, str]]  # (look, period)
    alias_of: tuple[str, str] | None = None  # a slice of one cell: that cell's rows, relabelled

    @property
    def filters(self) -> dict:
        return {
            "site": None if self.site == "all" else self.site,
            "model_version": None if self.model_version == "all" else self.model_version,
        }


# A look's row_index (sql/recurring/monitor_look_records.sql): the row's number in the look's log, as a
# reader holding that log numbers it (what a broken rule's line names), or its number in its landed file
# (no sort of the look: enough to ask whether the rules hold, which never reads it). Both are SQL files.
LOG_ROW_NUMBER, FILE_ROW_NUMBER = "recurring/monitor_look_log_row_number", "recurring/monitor_look_file_row_number"


def look_records(con, piece: LookSlice, period: str, numbered: bool = True):
    """The relation of one look's records on `con` (sql/recurring/monitor_look_records.sql, unordered):
    the slice's filters and the look's last period registered as `monitor_look`, read when it runs.
    `numbered`: row_index is the row's number in the look's log (LOG_ROW_NUMBER), else in its file."""
    where = {**piece.filters, "period": period}
    con.register("monitor_look", pa.table({k: pa.array([v], pa.string()) for k, v in where.items()}))
    number = load_sql(LOG_ROW_NUMBER if numbered else FILE_ROW_NUMBER)
    return con.sql(fill("recurring/monitor_look_records", fragments={"row_index": number}))


def _look_verdict(con, piece: LookSlice, period: str, source: str, analysis: str) -> RecordSet:
    """One look's records validated where they lie (records_in_place), without sorting the look; where a
    rule breaks, validated again numbered in the log's order, so the line names the row as a reader
    holding that log would."""
    try:
        return _validated_look(con, piece, period, source, analysis, numbered=False)
    except RecordError:
        return _validated_look(con, piece, period, source, analysis, numbered=True)


def _validated_look(con, piece: LookSlice, period: str, source: str, analysis: str, numbered: bool) -> RecordSet:
    look_records(con, piece, period, numbered).create_view("raw_records")
    try:
        return records_in_place(con, source, analysis)
    finally:
        drop_view(con, "raw_records")


def look_rows(con, piece: LookSlice, period: str) -> pa.Table:
    """One look's records held, as a log in its order (look_records ordered by row_index)."""
    return look_records(con, piece, period).order("row_index").arrow().read_all().drop(["row_index"])


def look_slices(con) -> list[LookSlice]:
    found: dict[tuple[str, str], LookSlice] = {}
    for site, model_version, cells, look, period in con.execute(load_sql("recurring/monitor_looks")).fetchall():
        key = (site, model_version)
        if key not in found:
            found[key] = LookSlice(site, model_version, cells, [])
        found[key].looks.append((look, period))
    cells = [k for k in found if k[0] != "all" and k[1] != "all"]
    for key, piece in found.items():
        if key not in cells and piece.cells == 1:  # one cell: the same data (and hypotheses) as that cell
            piece.alias_of = next(c for c in cells if key[0] in ("all", c[0]))
    return list(found.values())


def _reason_number(value) -> str:
    return "none" if value is None else f"{value:.4g}"


def _bounds_text(lower, upper) -> str:
    low = _reason_number(lower) if lower is not None else "-inf"
    high = _reason_number(upper) if upper is not None else "inf"
    return f"[{low}, {high}]"


def _reason(row: dict, unavailable: str | None) -> str:
    bounds = _bounds_text(row["lower"], row["upper"])
    if unavailable:
        return unavailable
    if row["estimate"] is None or row["cs_lower"] is None or math.isnan(row["cs_lower"]):
        return f"no confidence sequence: {row['n_clusters'] or 0} clusters to date" + (
            " (delta needs a changed case)" if row["metric"] == "delta" else " (needs at least 2)"
        )
    band = f"[{row['cs_lower']:.4g}, {row['cs_upper']:.4g}] at level {row['alpha_adjusted']:.3g}"
    if row["n_clusters"] < row["min_clusters"]:
        return (
            f"{row['n_clusters']} clusters to date, fewer than the protocol's min_clusters "
            f"{row['min_clusters']}: no decision yet (CS {band})"
        )
    looks = sorted({row["_lower_look"], row["_upper_look"]} - {None})
    what = (
        "the confidence sequence"
        if looks in ([], [row["look"]])
        else "the running intersection of the confidence sequence (looks " + " and ".join(map(str, looks)) + ")"
    )
    if row["status"] == "alert" and row["cs_lower"] > row["cs_upper"] and _within(row):
        return (
            f"the confidence sequences of looks {row['_lower_look']} and {row['_upper_look']} at level "
            f"{row['alpha_adjusted']:.3g} are disjoint ({row['cs_lower']:.4g} > {row['cs_upper']:.4g}): the "
            "metric has changed, which a sequence valid under a stationary metric does not allow"
        )
    if row["status"] == "alert":
        side = "below" if row["lower"] is not None and row["cs_upper"] < row["lower"] else "above"
        return f"{what} {band} lies wholly {side} the bounds {bounds}"
    if row["status"] == "pass":
        return f"{what} {band} lies wholly within the bounds {bounds}"
    return f"{what} {band} overlaps a bound of {bounds}: not yet decided"


def _within(row: dict) -> bool:
    """The band's ends both within the bounds (an empty intersection that no bound excludes)."""
    low, high = row["lower"], row["upper"]
    return (low is None or row["cs_upper"] >= low) and (high is None or row["cs_lower"] <= high)


def pooling_reason(piece: LookSlice, period: str, err: RecordError) -> str:
    """Why the landed logs of a slice to a period cannot be read as one record: the broken rule's line."""
    return (
        f"the landed logs of {piece.site} / {piece.model_version} to {period} cannot "
        f"be pooled: {str(err).splitlines()[0]}"
    )


def _slice_records(
    con, slices: list[LookSlice]
) -> tuple[dict[tuple[int, int], RecordSet], dict[tuple[int, int], RecordError]]:
    """(slice, look) -> a validated record that look's level and counts are laid on, or the error that
    says why its records cannot be read as one (a pooling that breaks a record rule, e.g. logs of two
    record levels). A slice is validated once, whole (a look reads a subset of its rows); only a slice
    that fails whole is validated look by look, so that its looks before the break are still decided."""
    found, failed = {}, {}
    for index, piece in enumerate(slices):
        if piece.alias_of is not None:
            continue
        for look, period in reversed(piece.looks):
            source = f"lake:{LANDED_TABLE}/{piece.site}/{piece.model_version}"
            try:  # where the rows lie: no copy of the slice is held (each look names its own hash)
                records = _look_verdict(con, piece, period, source, str(index))
            except RecordError as err:
                failed[(index, look)] = err
                continue
            earlier = [k for k, _ in piece.looks if k <= look and (index, k) not in failed]
            found.update({(index, k): records for k in earlier})
            break  # every earlier look is a subset of these valid records
    return found, failed


def _look_level(counts: dict) -> tuple[str, bool]:
    """(record level, has_local) of a look from its counts: the rule of autheval.records.read (a record
    without a selection is proposal-only; with every changed case's local score, or none changed and
    local scores given, full counterfactual; else role-separated)."""
    if counts["n_executed"] == 0:
        return PROPOSAL_ONLY, False
    if counts["n_changed"] > 0 and counts["n_changed_local"] == counts["n_changed"]:
        return FULL, True
    if counts["n_changed"] == 0 and counts["n_local"] > 0:
        return FULL, True
    return ROLE_SEPARATED, False


def _look_recordsets(
    whole: dict[tuple[int, int], RecordSet], sums: dict[tuple[int, int], dict], hashes: dict[tuple[int, int], str]
) -> dict[str, RecordSet]:
    """What each look's records support (level and counts: sql/recurring/monitor_look_sums.sql) as a RecordSet
    without rows, for autheval.estimation.estimators.availability."""
    out = {}
    for (index, look), counts in sums.items():
        if (index, look) not in whole:
            continue
        level, has_local = _look_level(counts)
        out[f"{index}/{look}"] = replace(
            whole[(index, look)],
            analysis=f"{index}/{look}",
            level=level,
            has_local=has_local,
            has_global=counts["n_global"] > 0,
            n_cases=counts["n_cases"],
            n_clusters=counts["n_clusters"],
            n_changed=counts["n_changed"],
            n_local=counts["n_local"],
            rows=None,
            data_sha256=hashes[(index, look)],
        )
    return out


def _bootstrap(
    con, slices: list[LookSlice], whole: dict[tuple[int, int], RecordSet], reps: int
) -> tuple[dict, str | None]:
    """(analysis, unit, metric) -> (ci_lower, ci_upper) of the fixed-sample bootstrap (TREND_SCHEME) of
    every look, or the reason there is none. Each look's records are read, validated and resampled on
    their own (reps = 0: none, and no such cost), so a run holds one look's records at a time, not every
    look's (each look holds its slice's records to date), and a look's interval depends on its records
    alone, to the bit (figures: docs/benchmarks.md, issue 30)."""
    if reps <= 0 or not whole:
        return {}, None
    intervals: dict = {}
    for index, piece in enumerate(slices):
        for look, period in piece.looks:
            if (index, look) not in whole:
                continue
            part = look_rows(con, piece, period)
            records = records_from_table(
                part, f"{whole[(index, look)].source}/{period}", f"{index}/{look}", table_sha256(part)
            )
            del part
            try:
                result = estimate([records], scheme=TREND_SCHEME, reps=reps)
            except (RecordError, ValueError) as err:
                return {}, str(err).splitlines()[0]
            intervals.update(
                {(r["analysis"], r["unit"], r["metric"]): (r["ci_lower"], r["ci_upper"]) for r in result.estimates}
            )
    return intervals, None


def _look_hashes(con, slices: list[LookSlice]) -> dict[tuple[int, int], str]:
    """(slice, look) -> the data hash of a look: SHA-256 of its slice, its last period and the content
    keys of the landed files it reads (each key names a file's bytes), so that the same landed data
    gives the same hash without hashing every look's rows again."""
    keys = {(r["slice"], r["look"]): r["landed_keys"] for r in rows(con, "recurring/monitor_look_keys")}
    out = {}
    for index, piece in enumerate(slices):
        if piece.alias_of is not None:
            continue
        for look, period in piece.looks:
            text = json.dumps([piece.site, piece.model_version, period, keys.get((index, look), [])])
            out[(index, look)] = hashlib.sha256(text.encode()).hexdigest()
    return out


@dataclass
class LookStatistics:
    """What the monitor decides each look from, however it was formed: from the lake's landed rows
    (landed_statistics), or pooled from site exports (autheval.sites.monitor). Beside it, on the
    connection: monitor_period_sums and monitor_period_moments (what each period adds to each slice,
    sql/recurring/monitor_period_*.sql, in any number of parts) and landed_records (at least its site,
    model_version, period and landed_key: the looks and their data hashes)."""

    slices: list[LookSlice]
    whole: dict[tuple[int, int], RecordSet]  # (slice, look) -> a valid record its level and counts are laid on
    failed: dict[tuple[int, int], str]  # (slice, look) -> why it is not decided (its logs cannot be pooled)
    errors: dict[tuple[int, int], RecordError]  # (slice, look) -> the record rule its logs break
    intervals: dict[tuple[str, str, str], tuple]  # (analysis, unit, metric) -> the fixed-sample interval
    no_interval: dict[int, str]  # slice -> why it has no fixed-sample interval
    reps: int  # replicates of the fixed-sample interval (0: none)
    withheld: set[tuple[int, int]] = field(default_factory=set)  # looks whose cluster count is not known
    case_mix_counts: pa.Table | None = None  # monitor_case_mix_counts' rows (None: from landed_records)


def register_slices(con, slices: list[LookSlice]) -> None:
    """`monitor_slices` on `con`: every slice that is not an alias, by its index."""
    con.register(
        "monitor_slices",
        pa.table(
            {
                "slice": pa.array([i for i, s in enumerate(slices) if s.alias_of is None], pa.int64()),
                "site": [s.site for s in slices if s.alias_of is None],
                "model_version": [s.model_version for s in slices if s.alias_of is None],
            }
        ),
    )


def period_statistics(con) -> None:
    """monitor_period_sums and monitor_period_moments on `con`, from monitor_cluster_periods."""
    to_table(con, "monitor_period_sums", "recurring/monitor_period_sums")
    to_table(con, "monitor_period_moments", "recurring/monitor_period_moments")


def landed_statistics(con, slices: list[LookSlice], reps: int) -> LookStatistics:
    """The LookStatistics of the landed records on `con` (landed_records, monitor_slices and the period
    tables registered): each look validated as one record, and its fixed-sample interval."""
    whole, errors = _slice_records(con, slices)
    failed = {(i, k): pooling_reason(slices[i], dict(slices[i].looks)[k], err) for (i, k), err in errors.items()}
    intervals, no_interval = _bootstrap(con, slices, whole, reps)
    reasons = dict.fromkeys(range(len(slices)), no_interval) if no_interval else {}
    return LookStatistics(slices, whole, failed, errors, intervals, reasons, reps)


def monitor_table(landed: pa.Table | StoredFiles | None, protocol: Protocol, reps: int = DEFAULT_REPS) -> Monitoring:
    """The monitor and case-mix tables of every landed log to date under `protocol`, and the alerts in
    force (the latest look of a (site, model_version, mechanism, rule) whose status is `alert`).
    `landed`: the lake's landed Parquet files (landed_table_files), read where they lie, or landed rows
    held; either way a superseded file's rows are left out (autheval.monitoring.landing.landed_view).
    `reps`: replicates of the fixed-sample bootstrap interval beside the confidence sequence (0: none).
    No landed data gives the empty tables."""
    if landed is None or len(landed) == 0:
        return Monitoring(empty_monitor(), empty_case_mix(), [])
    con = connect(threads=1)  # same inputs, same bytes
    landed_view(con, landed)
    slices = look_slices(con)
    register_slices(con, slices)
    to_table(con, "monitor_cluster_periods", "recurring/monitor_cluster_periods")
    period_statistics(con)
    return decide_looks(con, landed_statistics(con, slices, reps), protocol)


def decide_looks(con, stats: LookStatistics, protocol: Protocol) -> Monitoring:
    """The monitor and case-mix tables and the alerts of the looks `stats` describes (the period tables
    on `con`) under `protocol`: the same SQL whether a lake or a hub formed them."""
    slices, reps = stats.slices, stats.reps
    to_table(con, "monitor_look_sums", "recurring/monitor_look_sums")
    sums = {(r["slice"], r["look"]): r for r in rows(con, "recurring/monitor_look_profiles")}
    hashes = _look_hashes(con, slices)
    recordsets = _look_recordsets(stats.whole, sums, hashes)
    failed = {f"{index}/{look}": reason for (index, look), reason in stats.failed.items()}
    intervals = stats.intervals
    to_table(con, "monitor_delta_method", "recurring/monitor_look_ratios")

    rows_out = []
    hypotheses = _hypotheses(slices, protocol)
    cs_rows = _cs_rows(con, slices, hypotheses, protocol)

    # each hypothesis's looks: its p-value (None: not decidable there) and whether it enters a family
    looks: list[dict] = []
    for h, (index, rule, alpha, min_clusters) in enumerate(hypotheses):
        piece = slices[index]
        for look, period in piece.looks:
            label = f"{index}/{look}"
            cs = cs_rows.get((label, rule.metric, rule.unit))
            records = recordsets.get(label)
            available = records is not None and availability(records, rule.metric).available
            decidable = available and cs is not None and cs["n_clusters"] >= min_clusters
            looks.append(
                {
                    "hypothesis": h,
                    "look": look,
                    "period": period,
                    "p_value": cs["p_value"] if decidable and cs is not None else None,  # decidable: cs is a row
                    "alpha": alpha,
                    "tested": available,
                }
            )
    hypothesis_looks = pa.Table.from_pylist(
        looks,
        schema=schema("hypothesis look period p_value alpha tested"),
    )
    levels = {
        (r["hypothesis"], r["period"]): r
        for r in adjusted_levels(con, hypothesis_looks, protocol.multiplicity, protocol.family_size).to_pylist()
    }

    decisions: list[dict] = []
    for row in looks:
        index, rule, alpha, min_clusters = hypotheses[row["hypothesis"]]
        label = f"{index}/{row['look']}"
        cs = cs_rows.get((label, rule.metric, rule.unit)) or {}
        level = levels.get((row["hypothesis"], row["period"]))
        decisions.append(
            {
                "row_id": len(decisions),
                "hypothesis": row["hypothesis"],
                "look": row["look"],
                "available": bool(row["tested"]),
                "estimate": cs.get("estimate"),
                "sigma": cs.get("sigma"),
                "n_clusters": cs.get("n_clusters"),
                "rho2": cs.get("rho2"),
                "alpha_adjusted": level["alpha_adjusted"] if level else alpha,
                "min_clusters": min_clusters,
                "lower": rule.lower,
                "upper": rule.upper,
                "p_value": row["p_value"],
                "p_running": level["p_running"] if level else None,
                "family_size": level["family_size"] if level else None,
            }
        )
    decided = _decide(con, decisions)

    provenance = Provenance(scheme=TREND_SCHEME, seed=DEFAULT_SEEDS[TREND_SCHEME], reps=reps)
    ci_method = TREND_SCHEME if reps > 0 else None
    for row, decision in zip(looks, decisions):
        index, rule, alpha, min_clusters = hypotheses[row["hypothesis"]]
        piece = slices[index]
        label = f"{index}/{row['look']}"
        records = recordsets.get(label)
        status = decided[decision["row_id"]]
        out = {
            "site": piece.site,
            "model_version": piece.model_version,
            "mechanism": MECHANISM,
            "metric": rule.metric,
            "unit": rule.unit,
            "period": row["period"],
            "look": row["look"],
            "n_clusters": None
            if (index, row["look"]) in stats.withheld
            else records.n_clusters
            if records
            else decision["n_clusters"],
            "estimate": decision["estimate"] if decision["available"] else None,
            "cs_lower": status["cs_lower"] if decision["available"] else None,
            "cs_upper": status["cs_upper"] if decision["available"] else None,
            "lower": rule.lower,
            "upper": rule.upper,
            "status": status["status"],
            "alpha": alpha,
            "alpha_adjusted": decision["alpha_adjusted"],
            "p_value": decision["p_value"],
            "p_running": decision["p_running"],
            "family_size": decision["family_size"],
            "_lower_look": status["lower_look"],
            "_upper_look": status["upper_look"],
            "multiplicity": protocol.multiplicity,
            "horizon_clusters": protocol.horizon_clusters,
            "min_clusters": min_clusters,
            "interval_method": INTERVAL_METHOD,
            "ci_method": ci_method,
            "protocol_version": protocol.version,
            "protocol_sha256": protocol.sha256,
            "data_sha256": hashes.get((index, row["look"])),
            "rule_version": None,
        }
        ci = intervals.get((label, rule.unit, rule.metric))
        out["ci_lower"], out["ci_upper"] = ci if ci and decision["available"] else (None, None)
        unavailable = failed.get(label)
        if unavailable is None and records is not None and not decision["available"]:
            unavailable = f"{rule.metric} is not available: {availability(records, rule.metric).reason}"
        out["reason"] = _reason(out, unavailable)
        declared = protocol.family_size
        if declared is not None and (decision["family_size"] or 0) > declared:
            out["reason"] += (
                f"; the family has {decision['family_size']} hypotheses, more than the protocol's declared "
                f"family_size {declared}: corrected over all of them, and the guarantee over runs is lost"
            )
        no_interval = stats.no_interval.get(index)
        if no_interval and reps > 0:
            out["reason"] += f"; no bootstrap interval: {no_interval}"
        rows_out.append(out)
    rows_out.extend(_alias_rows(rows_out, slices))
    order = {(s.site, s.model_version): i for i, s in enumerate(slices)}
    rows_out.sort(key=lambda r: (order[(r["site"], r["model_version"])], _rule_order(protocol, r), r["look"]))
    table = pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in MONITOR_SCHEMA} for r in rows_out], schema=MONITOR_SCHEMA
    )
    table = stamp(table, provenance).select(MONITOR_SCHEMA.names).cast(MONITOR_SCHEMA)
    site_hashes = {
        (piece.site, period): hashes[(i, look)]
        for i, piece in enumerate(slices)
        if piece.alias_of is None and piece.model_version == "all"
        for look, period in piece.looks
    }
    for piece in slices:  # a site with one model version: its site slice is that cell's
        if piece.alias_of is not None and piece.model_version == "all" and piece.site != "all":
            cell = next(i for i, s in enumerate(slices) if (s.site, s.model_version) == piece.alias_of)
            site_hashes.update({(piece.site, period): hashes[(cell, look)] for look, period in piece.looks})
    case_mix = case_mix_table(con, protocol, site_hashes, stats.case_mix_counts)
    return Monitoring(table, case_mix, alerts(table))


def _rule_order(protocol: Protocol, row: dict) -> int:
    keys = [(r.metric, r.unit) for r in protocol.rules]
    key = (row["metric"], row["unit"])
    return keys.index(key) if key in keys else len(keys)


def _hypotheses(slices: list[LookSlice], protocol: Protocol) -> list[tuple[int, Rule, float, int]]:
    """(slice index, rule, alpha, min_clusters) of every slice that is not an alias and rule of its
    site (a pooled slice: the protocol's own settings, or the `all` override)."""
    out: list[tuple[int, Rule, float, int]] = []
    for index, piece in enumerate(slices):
        if piece.alias_of is not None:
            continue
        alpha, min_clusters, rules = protocol.settings(piece.site)
        out.extend((index, rule, alpha, min_clusters) for rule in rules)
    return out


def _cs_rows(con, slices, hypotheses, protocol) -> dict:
    """(analysis, metric, unit) -> the CS row with the p-value against its rule, one SQL run per
    distinct level (a site may override alpha, which tunes its boundary)."""
    out = {}
    by_alpha: dict[float, list[dict]] = {}
    for index, rule, alpha, _ in hypotheses:
        for look, _period in slices[index].looks:
            by_alpha.setdefault(alpha, []).append(
                {
                    "analysis": f"{index}/{look}",
                    "rule": f"{rule.metric}/{rule.unit}",
                    "unit": rule.unit,
                    "metric": rule.metric,
                    "lower": rule.lower,
                    "upper": rule.upper,
                }
            )
    bounds_schema = schema("analysis rule unit metric lower upper")
    for alpha, bounds in by_alpha.items():
        table = sequences_from_delta_method(
            con, alpha, protocol.horizon_clusters, pa.Table.from_pylist(bounds, schema=bounds_schema)
        )
        for row in table.to_pylist():
            out[(row["analysis"], row["metric"], row["unit"])] = row
    return out


def _decide(con, decisions: list[dict]) -> dict[int, dict]:
    """row_id -> cs_lower, cs_upper (at the adjusted level) and status (sql/recurring/monitor_status.sql)."""
    if not decisions:
        return {}
    decisions_schema = schema(
        "row_id hypothesis look available estimate sigma n_clusters rho2 alpha_adjusted min_clusters lower upper"
    )
    con.register(
        "monitor_decisions",
        pa.Table.from_pylist([{k: d[k] for k in decisions_schema.names} for d in decisions], schema=decisions_schema),
    )
    try:
        return {r["row_id"]: r for r in rows(con, "recurring/monitor_status")}
    finally:
        con.unregister("monitor_decisions")


def _alias_rows(rows_out: list[dict], slices: list[LookSlice]) -> list[dict]:
    """The rows of each one-cell pooled slice: its cell's rows under the pooled slice's name."""
    out = []
    for piece in slices:
        if piece.alias_of is None:
            continue
        for row in rows_out:
            if (row["site"], row["model_version"]) == piece.alias_of:
                out.append({**row, "site": piece.site, "model_version": piece.model_version})
    return out


# --- alerts and the status report --------------------------------------------------------------------

ALERT_KEYS = ("site", "model_version", "mechanism", "metric", "unit", "lower", "upper")


def _latest(monitor: pa.Table) -> list[tuple[dict, list[dict]]]:
    """(latest row, all rows in look order) of every (site, model_version, mechanism, rule)."""
    series: dict[tuple, list[dict]] = {}
    for row in monitor.to_pylist():
        series.setdefault(tuple(row[k] for k in ALERT_KEYS), []).append(row)
    return [(max(rows_, key=lambda r: r["look"]), sorted(rows_, key=lambda r: r["look"])) for rows_ in series.values()]


def alert_id(row: dict, first_period: str) -> str:
    """A stable name of one alert: the same series, bounds, protocol file and first alerting period give
    the same id in every run."""
    key = [row[k] for k in ALERT_KEYS] + [row["protocol_sha256"], first_period]
    return hashlib.sha256(json.dumps(key, sort_keys=False).encode()).hexdigest()[:ALERT_ID_LENGTH]


def alerts(monitor: pa.Table) -> list[dict]:
    """One dict per series whose latest look alerts, with its `alert_id` (first_period: the first look of
    the run of alerting looks that reaches the latest one)."""
    out = []
    for latest, series in _latest(monitor):
        if latest["status"] != "alert":
            continue
        first = latest
        for row in reversed(series):
            if row["status"] != "alert":
                break
            first = row
        out.append(
            {
                "alert_id": alert_id(latest, first["period"]),
                **{k: latest[k] for k in ALERT_KEYS},
                "period": latest["period"],
                "first_period": first["period"],
                "look": latest["look"],
                "n_clusters": latest["n_clusters"],
                "estimate": latest["estimate"],
                "cs_lower": latest["cs_lower"],
                "cs_upper": latest["cs_upper"],
                "alpha_adjusted": latest["alpha_adjusted"],
                "reason": latest["reason"],
                "protocol_version": latest["protocol_version"],
                "protocol_sha256": latest["protocol_sha256"],
            }
        )
    out.sort(key=lambda a: (a["site"], a["model_version"], a["metric"], a["unit"]))
    return out


def status_report(monitor: pa.Table) -> tuple[list[str], int]:
    """The lines `autheval monitor status` prints (the latest look of every (site, model_version,
    mechanism, rule)) and its exit code: 3 when any alerts, else 0."""
    lines, code = [], 0
    latest = sorted(
        (row for row, _ in _latest(monitor)),
        key=lambda r: (
            r["site"] == "all",
            r["site"],
            r["model_version"] == "all",
            r["model_version"],
            r["metric"],
            r["unit"],
        ),
    )
    for row in latest:
        if row["status"] == "alert":
            code = 3
        estimate = "n/a" if row["estimate"] is None else f"{row['estimate']:.4g}"
        lines.append(
            f"{row['status'].upper():12s} {row['site']} / {row['model_version']} / {row['mechanism']}: "
            f"{row['metric']} ({row['unit']}) {_bounds_text(row['lower'], row['upper'])}, period "
            f"{row['period']} (look {row['look']}), {row['n_clusters'] or 0} clusters, estimate {estimate}: "
            f"{row['reason']}"
        )
    if not lines:
        lines.append("no monitored looks yet: nothing has landed")
    return lines, code


# --- case mix -----------------------------------------------------------------------------------------


CASE_MIX_PRIOR = (
    0.5  # Jeffreys' Dirichlet(1/2, ...): the estimated-baseline test's mixtures (sql/recurring/monitor_case_mix.sql)
)
CASE_MIX_VOCABULARY = {  # the categories a dimension takes; any other a site shows ('missing', 'unspecified'...) joins
    "proposed_action": ACTIONS,
    "risk_stratum": RISK_LEVELS,
    "workflow_profile": ("changed", "accepted"),
    "record_level": (FULL,),
}


def case_mix_tests(con, protocol: Protocol, counts: pa.Table | None = None) -> list[dict]:
    """The case-mix test's rows (sql/recurring/monitor_case_mix.sql) of the landed records registered on `con` as
    landed_records (or of their `counts`, sql/recurring/monitor_case_mix_counts.sql's rows, where given: a
    hub's sites'): per site, look, dimension and category the clusters, shares, the log Bayes factor
    (or e-value) and the anytime-valid p-value, before any multiplicity correction."""
    periods = {"baseline_periods": protocol.baseline_periods}
    if counts is None:
        to_table(con, "monitor_case_mix_counts", "recurring/monitor_case_mix_counts", periods)
    else:
        con.register("monitor_case_mix_counts", counts)
    reference = [
        {"dimension": d, "category": c, "share": s}
        for d, shares in protocol.case_mix_reference.items()
        for c, s in shares.items()
    ]
    con.register(
        "monitor_case_mix_reference",
        pa.Table.from_pylist(
            reference,
            schema=pa.schema([("dimension", pa.string()), ("category", pa.string()), ("share", pa.float64())]),
        ),
    )
    con.register(
        "monitor_case_mix_vocabulary",
        pa.table(
            {
                "dimension": [d for d, cats in CASE_MIX_VOCABULARY.items() for _ in cats],
                "category": [c for cats in CASE_MIX_VOCABULARY.values() for c in cats],
            }
        ),
    )
    return rows(
        con,
        "recurring/monitor_case_mix",
        {
            "baseline_periods": protocol.baseline_periods,
            "concentration": float(protocol.case_mix_concentration),
            "prior": CASE_MIX_PRIOR,
        },
    )


def case_mix_table(
    con, protocol: Protocol, hashes: dict[tuple[str, str], str], counts: pa.Table | None = None
) -> pa.Table:
    """monitor_case_mix of the landed records registered on `con` (with deployment columns): per site,
    period, dimension and category, the clusters first seen and shares, and per (site, period,
    dimension) the Bayes factor (e-value), the anytime-valid p-value and whether the mix has shifted
    (p <= alpha over the number of site x dimension tests: Bonferroni). `hashes`: (site, period) -> the
    data hash of the site's records to that period; `counts`: case_mix_tests'."""
    found = case_mix_tests(con, protocol, counts)
    tests = {(r["site"], r["dimension"]) for r in found}
    level = protocol.alpha / max(1, len(tests))
    out = []
    for r in found:
        declared = r["dimension"] in protocol.case_mix_reference
        if not r["tested"]:
            shifted, reason = False, f"baseline period {r['look']} of {protocol.baseline_periods}"
            bf = None
        else:
            bf = math.exp(r["log_bayes_factor"]) if r["log_bayes_factor"] < 709 else math.inf
            shifted = r["p_value"] <= level
            against = (
                "the declared reference"
                if declared
                else f"the clusters of the site's first {protocol.baseline_periods} periods"
            )
            verdict = "shifted" if shifted else "no shift shown"
            reason = (
                f"{r['dimension']} mix {verdict} against {against}: anytime p = {r['p_value']:.3g} "
                f"{'<=' if shifted else '>'} {level:.3g} (alpha {protocol.alpha:g} over {len(tests)} site x "
                "dimension tests)"
            )
        out.append(
            {
                "site": r["site"],
                "period": r["period"],
                "look": r["look"],
                "dimension": r["dimension"],
                "category": r["category"],
                "count": r["count"],
                "baseline_share": r["baseline_share"],
                "share": r["share"],
                "bayes_factor": bf,
                "p_value": r["p_value"],
                "shifted": shifted,
                "reason": reason,
                "alpha": level,
                "protocol_version": protocol.version,
                "protocol_sha256": protocol.sha256,
                "data_sha256": hashes.get((r["site"], r["period"])),
            }
        )
    dims = {d: i for i, d in enumerate(CASE_MIX_DIMENSIONS)}
    out.sort(key=lambda r: (r["site"], r["look"], dims.get(r["dimension"], 99), r["category"]))
    return pa.Table.from_pylist(out, schema=CASE_MIX_SCHEMA)
