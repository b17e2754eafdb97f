"""Monitoring benchmark (issue 18): false alerts and detection of the anytime-valid monitor, in one run.

1. Machine: cores, free memory, load average.
2. Null: --deployments simulated deployments (autheval.monitoring.deployment_sim; 3 sites, 24 monthly looks, the
   true gap exactly on the default protocol's lower bound of Delta_authority, the intervention rate
   inside its bounds). Every look of every deployment, per site and pooled over the sites (the
   monitor's slices), is one analysis of one query: autheval.monitoring.monitor.confidence_sequences (the
   anytime p-values against the protocol's bounds) and sql/estimates/delta_method.sql (the fixed-sample 95%
   interval). The share of deployments with any false alert, over every look, slice and rule, for
   (a) the naive 95% interval at every look, (b) the confidence sequence at alpha, (c) the confidence
   sequence at the level the protocol's multiplicity correction gives (Holm over slices x rules per
   period: autheval.monitoring.monitor.adjusted_levels, the monitor's own), each look needing min_clusters.
3. Drift: the same deployments with the gap of site-2 moving 0.5 simulator units past the bound from
   month 7: the share that alert at site-2 by month 24, the median delay (months of drifted data at the
   first alert: 1 = at the look of month 7), and false alerts elsewhere.
4. One monthly look: on --look-records landed records (default 10M; 3 sites x 24 months, landed by
   autheval.monitoring.landing.read_landed in a child of its own, not timed, into a Parquet file as the lake
   keeps it), the latest look's confidence sequences (`latest_look`: each site's per-cluster sums, the pooled
   slice's from them, then confidence_sequences against the protocol's bounds; goal (issue 30): under 10 s
   and 2 GB) and the monitor's whole run (autheval.monitoring.monitor.monitor_table: every slice, rule and
   look, as each monthly run recomputes them) without the bootstrap interval beside, the landed file read
   where it lies as the monitor asset reads the lake's (goal (issue 30): under 2 GB), and the same with the
   file read into memory first as the baseline; then the whole run with the interval on --monitor-records
   (default 100k). Each in a child process with its own peak memory;
   --look-only prints only this table, --latest-look-only (with it) only its first row.
5. Case mix: the monitor's case-mix test (autheval.monitoring.monitor.case_mix_tests) on --case-mix-deployments
   stationary deployments and as many with --case-mix-drift planted: deployments with any shift
   reported (Bonferroni over a deployment's site x dimension tests), and detection at site-1.

Usage: python benchmarks/monitoring.py [--deployments 500] [--clusters-per-month 30] [--look-records N]
       [--monitor-records N] [--skip-look] [--case-mix-deployments 500] [--case-mix-drift SPEC]
       [--case-mix-only] [--look-only [--latest-look-only]]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autheval.monitoring.deployment_sim import DeploymentModel, month_label, parse_drift, simulate, site_name
from autheval.records.schema import FULL
from autheval.vocabulary import ACTIONS, RISK_LEVELS
from benchmarks.peer import child_rusage, machine_line
from warehouse.sql import connect, load_sql, run, to_table

SITES, MONTHS = 3, 24
DRIFT = "site-2:proposer_quality:-0.5:from=7"
CASE_MIX_DRIFT = "site-1:case_mix:0.5:from=7"  # half of site-1's new lesions move to high
Z95 = 1.959963984540054
METHODS = ("naive 95% interval at every look", "confidence sequence", "confidence sequence, multiplicity-corrected")


@dataclass
class Decisions:
    """Per deployment, slice (the sites, then all sites pooled), rule and look: the arrays [D, S + 1,
    R, M] of clusters to date and of each method's alert."""

    n_clusters: np.ndarray
    naive: np.ndarray
    cs: np.ndarray
    corrected: np.ndarray
    level: np.ndarray  # the level (c) decides at, after the correction
    seconds: dict | None = None  # where the time went

    def any_alert(self, method: str, mask: np.ndarray) -> np.ndarray:
        """Per deployment: any alert of `method` on a hypothesis of `mask` [S + 1, R] at any look."""
        return (getattr(self, method) & mask[None, :, :, None]).any(axis=(1, 2, 3))


def null_model(protocol, sites: int = SITES, months: int = MONTHS, clusters: int = 30, drifts=()) -> DeploymentModel:
    """The deployment whose true gap lies exactly on the protocol's lower bound of Delta_authority."""
    [gap_rule] = [r for r in protocol.rules if r.metric == "Delta_authority"]
    return DeploymentModel(
        sites=sites,
        months=months,
        clusters_per_month=clusters,
        gap=gap_rule.lower,
        drifts=tuple(parse_drift(d, sites, months) for d in drifts),
    )


def _bounds(protocol) -> pa.Table:
    return pa.table(
        {
            "rule": [f"{r.metric}/{r.unit}" for r in protocol.rules],
            "unit": [r.unit for r in protocol.rules],
            "metric": [r.metric for r in protocol.rules],
            "lower": pa.array([r.lower for r in protocol.rules], pa.float64()),
            "upper": pa.array([r.upper for r in protocol.rules], pa.float64()),
        }
    )


def _outside(lo: np.ndarray, hi: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """An interval wholly outside [lower, upper] (a NaN bound is open; a NaN interval is no decision)."""
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(hi < lower, nan=False) | np.nan_to_num(lo > upper, nan=False)


def decide(model: DeploymentModel, protocol, deployments: int, seed: int) -> Decisions:
    """Simulate `deployments` of `model` and decide every look of every slice and rule three ways."""
    from autheval.monitoring.monitor import adjusted_levels, confidence_sequences

    clock = [time.perf_counter()]
    seconds = {}

    def lap(name: str) -> None:
        clock.append(time.perf_counter())
        seconds[name] = clock[-1] - clock[-2]

    cases = simulate(model, seed=seed, deployments=deployments)
    lap("simulate")
    D, S, M, R = deployments, model.sites + 1, model.months, len(protocol.rules)
    con = connect()
    # One analysis per (deployment, site, month), so the lake's own per-cluster sums serve.
    month_key = (cases.deployment.astype(np.int64) * model.sites + cases.site) * M + cases.month
    con.register(
        "records",
        pa.table(
            {
                "analysis": month_key,
                "cluster_id": cases.cluster.astype(np.int64),
                "intervened": cases.intervened,
                "utility_executed_local": cases.u_executed,
                "utility_proposed_local": cases.u_proposed,
                "utility_proposed_global": cases.u_global,
            }
        ),
    )
    to_table(con, "sim_cluster_months", "records/cluster_sums")
    con.unregister("records")
    to_table(con, "cluster_stats", "recurring/deployment_sim_looks", {"sites": model.sites, "months": M})
    con.execute("DROP TABLE sim_cluster_months")
    lap("cluster sums of every look")

    shape = (D, S, R, M)
    rules = {f"{r.metric}/{r.unit}": i for i, r in enumerate(protocol.rules)}
    lower = np.array([np.nan if r.lower is None else r.lower for r in protocol.rules])[None, None, :, None]
    upper = np.array([np.nan if r.upper is None else r.upper for r in protocol.rules])[None, None, :, None]

    def place(table: pa.Table, rule_index: np.ndarray, columns: list[str]) -> dict[str, np.ndarray]:
        analysis = table.column("analysis").to_numpy()
        d, rest = np.divmod(analysis, S * M)
        s, m = np.divmod(rest, M)
        out = {}
        for name in columns:
            grid = np.full(shape, np.nan)
            grid[d, s, rule_index, m] = table.column(name).to_numpy(zero_copy_only=False).astype(float)
            out[name] = grid
        return out

    cs_table = confidence_sequences(con, "cluster_stats", protocol.alpha, protocol.horizon_clusters, _bounds(protocol))
    cs_rule = np.array([rules[r] for r in cs_table.column("rule").to_pylist()])
    cs = place(cs_table, cs_rule, ["n_clusters", "p_value", "cs_lower", "cs_upper"])
    lap("confidence_sequences")
    naive_table = run(con, "estimates/delta_method", {"z_lower": -Z95, "z_upper": Z95})
    keys = [
        f"{m}/{u}" for m, u in zip(naive_table.column("metric").to_pylist(), naive_table.column("unit").to_pylist())
    ]
    kept = np.array([k in rules for k in keys])
    naive_table = naive_table.filter(pa.array(kept))
    naive = place(naive_table, np.array([rules[k] for k, keep in zip(keys, kept) if keep]), ["ci_lower", "ci_upper"])
    lap("naive intervals")

    decidable = np.nan_to_num(cs["n_clusters"], nan=0) >= protocol.min_clusters
    p = cs["p_value"]
    # (c) the monitor's own correction per deployment: Holm (or the declared method) over its slices x
    # rules, per period, on the running minimum of each hypothesis's anytime p-values
    corrected_level = np.full(shape, np.nan)
    hypothesis = np.arange(S * R).reshape(S, R)
    looks = np.arange(1, M + 1)
    for d in range(D):
        usable = decidable[d] & ~np.isnan(p[d])
        table = pa.table(
            {
                "hypothesis": np.repeat(hypothesis.ravel(), M).astype(np.int64),
                "look": np.tile(looks, S * R).astype(np.int64),
                "period": pa.array([f"{m:03d}" for m in np.tile(looks, S * R)]),
                "p_value": pa.array(np.where(usable, p[d], np.nan).ravel(), mask=~usable.ravel()),
                "alpha": np.full(S * R * M, protocol.alpha),
                "tested": np.ones(S * R * M, bool),
            }
        )
        levels = adjusted_levels(con, table, protocol.multiplicity)
        h = levels.column("hypothesis").to_numpy()
        m = np.array([int(x) for x in levels.column("period").to_pylist()]) - 1
        corrected_level[d, h // R, h % R, m] = levels.column("alpha_adjusted").to_numpy()
    lap("correction")
    with np.errstate(invalid="ignore"):
        return Decisions(
            n_clusters=cs["n_clusters"],
            naive=decidable & _outside(naive["ci_lower"], naive["ci_upper"], lower, upper),
            cs=decidable & _outside(cs["cs_lower"], cs["cs_upper"], lower, upper),
            corrected=decidable & np.nan_to_num(p < corrected_level, nan=False),
            level=corrected_level,
            seconds=seconds,
        )


def null_hypotheses(model: DeploymentModel, protocol) -> np.ndarray:
    """[S + 1, R]: the hypotheses that are true in `model` (a rule whose true value stays within its
    bounds at that slice through every month), from the model's truth."""
    from autheval.monitoring.deployment_sim import truth

    rows = truth(model)
    S, R = model.sites + 1, len(protocol.rules)
    mask = np.ones((S, R), bool)
    for i, rule in enumerate(protocol.rules):
        key = {"Delta_authority": "Delta_authority", "intervention_rate": "intervention_rate", "delta": "delta"}.get(
            rule.metric
        )
        if key is None:
            continue
        for s in range(S):
            values = np.array([r[key] for r in rows if s == model.sites or r["site"] == f"site-{s + 1}"])
            if s == model.sites:  # the pooled slice: the sites' mean per month (equal expected volume)
                values = values.reshape(model.sites, model.months).mean(axis=0)
            tol = 1e-12
            inside = (rule.lower is None or np.all(values >= rule.lower - tol)) and (
                rule.upper is None or np.all(values <= rule.upper + tol)
            )
            mask[s, i] = inside
    return mask


def delays(decisions: Decisions, site: int, rule: int, start: int) -> np.ndarray:
    """Per deployment: months of drifted data at the first corrected alert of `site`'s `rule` at or
    after month `start` (1 = at the first drifted month's look), NaN when it never alerts."""
    alerts = decisions.corrected[:, site, rule, start - 1 :]
    first = np.argmax(alerts, axis=1).astype(float) + 1
    first[~alerts.any(axis=1)] = np.nan
    return first


# --- one monthly look on 10M landed records ----------------------------------------------------------


def landed_deployment(records: int, folder: Path) -> tuple[pa.Table, Path, float, float]:
    """A deployment of about `records` images (3 sites x 24 months) landed as the lake lands it (the
    logs written as Parquet under `folder`, each read and validated by autheval.monitoring.landing.read_landed):
    the landed table, the same rows as the lake keeps them (a Parquet file under `folder`), and the seconds
    writing and landing took."""
    import pyarrow.parquet as pq

    from autheval.monitoring.deployment_sim import write_deployment
    from autheval.monitoring.landing import read_landed

    clusters = max(1, round(records / (SITES * MONTHS * 2.5)))
    model = DeploymentModel(sites=SITES, months=MONTHS, clusters_per_month=clusters)
    started = time.perf_counter()
    (folder / "logs").mkdir()
    paths = write_deployment(model, folder / "logs", fmt="parquet")
    written = time.perf_counter() - started
    started = time.perf_counter()
    landed = pa.concat_tables([read_landed(path)[1] for path in paths], promote_options="default")
    land = time.perf_counter() - started
    pq.write_table(landed, folder / "landed_records.parquet")
    return landed, folder / "landed_records.parquet", written, land


def latest_look(landed: Path, protocol) -> int:
    """The latest look's confidence sequences of every slice (each site, every site pooled) of the landed
    records in the Parquet file `landed`, scanned where it lies: each site's per-cluster sums in one GROUP
    BY, the pooled slice's being the same clusters' (sql/recurring/deployment_sim_pooled_sums.sql), then
    confidence_sequences against the protocol's bounds (the delta method's sums need no rank, so the clusters
    are not sorted); its rows."""
    from autheval.monitoring.monitor import confidence_sequences

    con = connect()
    con.read_parquet(str(landed)).create_view("landed_records")
    con.sql(load_sql("recurring/deployment_sim_look_slices")).create_view("records")
    to_table(con, "site_cluster_sums", "records/cluster_sums")
    con.sql(load_sql("recurring/deployment_sim_pooled_sums")).create_view("look_sums")
    bounds = _bounds(protocol)
    return confidence_sequences(con, "look_sums", protocol.alpha, protocol.horizon_clusters, bounds).num_rows


def look_child(mode: str, records: int, reps: int, folder: Path) -> None:
    """In a child process, prints JSON: `land`: a deployment of about `records` records landed under
    `folder` (landed_deployment: its Parquet file as the lake keeps it; the seconds writing and landing
    took); `core`: the latest look of that file (`latest_look`, scanned where it lies); `monitor`: the
    monitor's whole run on it (autheval.monitoring.monitor.monitor_table: every slice, rule and look, as the
    monthly run recomputes them, with `reps` bootstrap replicates beside), the file read where it lies as
    the monitor asset reads the lake's landed partitions; `held`: the same with the file read into memory
    first (how the asset read them before: the baseline of the same run). The child's peak memory is then
    the look's own."""
    import pyarrow.parquet as pq

    from autheval.monitoring.monitor import monitor_table
    from autheval.monitoring.protocol import load_protocol
    from autheval.records.datasets import StoredFiles

    if mode == "land":
        landed, _, written, land = landed_deployment(records, folder)
        print(json.dumps({"records": landed.num_rows, "write": written, "land": land}))
        return
    protocol = load_protocol(None)
    path = folder / "landed_records.parquet"
    started = time.perf_counter()
    if mode == "core":
        rows = latest_look(path, protocol)
    else:
        # as the asset reads the lake's partitions (landing.landed_table_files): the files with their rows
        # from the footers, so that few rows in all are read once (landed_view), more where they lie
        files = StoredFiles((str(path),), rows=pq.read_metadata(path).num_rows)
        landed = pq.read_table(path) if mode == "held" else files
        rows = monitor_table(landed, protocol, reps=reps).table.num_rows
    print(json.dumps({"look": time.perf_counter() - started, "rows": rows}))


def simulated_landed(model: DeploymentModel, deployments: int, seed: int) -> pa.Table:
    """`deployments` simulated deployments of `model` as one landed_records table with the columns the
    case-mix SQL reads; deployment d's site s is the site named 'd/site-s', so one run of the SQL
    tests them all. A case's row_index is its time in the month (the simulator's order)."""
    cases = simulate(model, seed=seed, deployments=deployments)
    site = (cases.deployment * model.sites + cases.site).astype(np.int64)
    names = np.array([f"{d}/{site_name(s + 1)}" for d in range(deployments) for s in range(model.sites)])
    periods = np.array([month_label(model.start, m) for m in range(model.months)])
    return pa.table(
        {
            "site": pa.array(names[site]),
            "period": pa.array(periods[cases.month]),
            "cluster_id": pa.array(cases.cluster.astype(np.int64)).cast(pa.string()),
            "landed_file": pa.array(periods[cases.month]),
            "row_index": pa.array((cases.second * 2**40).astype(np.int64)),
            "proposed_action": pa.array(np.array(ACTIONS)[cases.proposed]),
            "intervened": pa.array(cases.intervened),
            "record_level": pa.array([FULL] * len(cases.site)),
            "risk_stratum": pa.array(np.array(RISK_LEVELS)[cases.stratum]),
        }
    )


def case_mix_shifts(protocol, model: DeploymentModel, deployments: int, seed: int) -> tuple[dict[str, int], list]:
    """The monitor's case-mix test (case_mix_tests: the SQL monitor_table runs) on `deployments`
    deployments of `model`, Bonferroni over each deployment's site x dimension tests as monitor_table
    does: per dimension, the deployments where some site's mix is reported shifted ('any': any
    dimension), and per deployment the first look of site-1 found shifted (None: never)."""
    from autheval.monitoring.monitor import case_mix_tests

    con = connect()
    con.register("landed_records", simulated_landed(model, deployments, seed))
    found = [r for r in case_mix_tests(con, protocol) if r["tested"]]
    dimensions = {r["dimension"] for r in found}
    level = protocol.alpha / (model.sites * len(dimensions))
    shifted: dict[int, set[str]] = {}
    first: list = [None] * deployments
    for r in found:
        if r["p_value"] <= level:
            d, site = r["site"].split("/")
            shifted.setdefault(int(d), set()).add(r["dimension"])
            if site == "site-1" and (first[int(d)] is None or r["look"] < first[int(d)]):
                first[int(d)] = r["look"]
    counts: dict[str, int] = {"any": len(shifted)}
    for dims in shifted.values():
        for dimension in dims:
            counts[dimension] = counts.get(dimension, 0) + 1
    return counts, first


def print_case_mix(protocol, n: int, drift: str, clusters: int, seed: int) -> None:
    """The case-mix table: false shifts on n stationary deployments, detection of `drift` on n more."""
    rows = []
    for label, drifts in (("stationary", ()), (drift, (drift,))):
        model = null_model(protocol, clusters=clusters, drifts=drifts)
        started = time.perf_counter()
        counts, first = case_mix_shifts(protocol, model, n, seed)
        seconds = time.perf_counter() - started
        found = np.array([f for f in first if f is not None], float)
        start = drifts and parse_drift(drifts[0], SITES, MONTHS).start
        rows.append(
            [
                label,
                f"{counts['any']}/{n}",
                f"{math.sqrt(protocol.alpha * (1 - protocol.alpha) / n):.3f}",
                ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "any") or "-",
                f"{len(found)}/{n}" if drifts else "-",
                f"{np.median(found) - start + 1:.0f}" if drifts and len(found) else "-",
                f"{seconds:.1f} s",
            ]
        )
    print(
        f"\nCase mix: {n} deployments ({SITES} sites x {MONTHS} months, {clusters} lesion "
        f"clusters a month; one observation per cluster; baseline = each site's first {protocol.baseline_periods} "
        f"months; Bonferroni over the {SITES} x dimension tests of a deployment at alpha {protocol.alpha}; "
        "autheval.monitoring.monitor.case_mix_tests, monitor_table's SQL, over all deployments at once)"
    )
    print(machine_line())
    print_table(
        [
            "deployments",
            "any shift reported",
            "MC error of alpha",
            "per dimension",
            "site-1 found shifted",
            "median delay (months)",
            "time",
        ],
        rows,
    )


def print_table(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def print_looks(args) -> None:
    """The monthly look table: the deployments landed by a child of their own (not timed as a look), then
    each computation in a child process of its own, with its peak memory."""
    import tempfile

    print(
        f"\nOne monthly look ({SITES} sites x {MONTHS} months landed; each in a child process of its own, timed "
        "from the landed records' Parquet file as the lake keeps it; landing itself is not part of a look)"
    )

    def child(mode: str, records: int, reps: int, folder: str) -> tuple[float, dict]:
        command = [sys.executable, str(Path(__file__).resolve()), "--look-child", mode, "--look-records", str(records)]
        command += ["--look-reps", str(reps), "--look-folder", folder]
        _, peak, out = child_rusage(command)
        return peak, json.loads(out.strip().splitlines()[-1])

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        landed = {}
        for records in sorted({args.look_records} | (set() if args.latest_look_only else {args.monitor_records})):
            folder = Path(tmp) / str(records)
            folder.mkdir()
            landed[records] = (str(folder), child("land", records, 0, str(folder))[1])
        for mode, records, reps in (
            ("core", args.look_records, 0),
            ("monitor", args.look_records, 0),
            ("held", args.look_records, 0),
            ("monitor", args.monitor_records, args.look_reps),
        )[: 1 if args.latest_look_only else 4]:
            print(machine_line())
            folder, land = landed[records]
            peak, result = child(mode, records, reps, folder)
            what = {
                "core": "the latest look's confidence sequences (cluster sums + confidence_sequences)",
                "monitor": f"monitor_table, every look{f', {reps} bootstrap replicates' if reps else ', no bootstrap'}",
                "held": "the same, the landed rows held in memory first (baseline)",
            }[mode]
            rows.append(
                [
                    what,
                    f"{land['records']:,}",
                    f"{land['land']:.1f} s",
                    f"{result['look']:.2f} s",
                    f"{result['look'] / (1 if mode == 'core' else MONTHS):.2f} s",
                    f"{peak:.0f} MB",
                ]
            )
            if mode == "core":
                met = result["look"] < 10 and peak < 2000
                print(f"  the latest look: goal (issue 30) under 10 s and 2 GB: {'met' if met else 'NOT met'}")
            elif mode == "monitor" and not reps:
                print(f"  the whole run: goal (issue 30) under 2 GB peak: {'met' if peak < 2000 else 'NOT met'}")
    print_table(["computation", "landed records", "landing (apart)", "time", "per look", "child peak RSS"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--clusters-per-month", type=int, default=30)
    parser.add_argument("--seed", type=int, default=20260718)
    parser.add_argument(
        "--look-records",
        type=int,
        default=10_000_000,
        help="landed records of the timed look's confidence sequences (default 10M)",
    )
    parser.add_argument(
        "--monitor-records",
        type=int,
        default=100_000,
        help="landed records of the timed monitor_table run with the bootstrap (default 100k)",
    )
    parser.add_argument(
        "--look-reps",
        type=int,
        default=200,
        help="bootstrap replicates of the fixed-sample interval in the timed run (default 200)",
    )
    parser.add_argument(
        "--case-mix-deployments",
        type=int,
        default=500,
        help="deployments of the case-mix test, stationary and with --case-mix-drift (default 500)",
    )
    parser.add_argument(
        "--case-mix-drift",
        default=CASE_MIX_DRIFT,
        help=f"the planted case-mix drift (a synth deployment --drift; default {CASE_MIX_DRIFT})",
    )
    parser.add_argument("--skip-look", action="store_true")
    parser.add_argument("--case-mix-only", action="store_true", help="only the case-mix table")
    parser.add_argument("--look-only", action="store_true", help="only the monthly look table")
    parser.add_argument("--latest-look-only", action="store_true", help="with --look-only: only the latest look")
    parser.add_argument("--look-child", choices=("land", "core", "monitor", "held"), help=argparse.SUPPRESS)
    parser.add_argument("--look-folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.look_child is not None:
        return look_child(args.look_child, args.look_records, args.look_reps, Path(args.look_folder))

    from autheval.monitoring.protocol import load_protocol

    protocol = load_protocol(None)
    if args.look_only:
        return print_looks(args)
    if args.case_mix_only:
        return print_case_mix(
            protocol, args.case_mix_deployments, args.case_mix_drift, args.clusters_per_month, args.seed + 2
        )
    D = args.deployments
    print(machine_line())
    print(
        f"protocol {protocol.version}: alpha {protocol.alpha}, horizon {protocol.horizon_clusters} clusters, "
        f"min_clusters {protocol.min_clusters}, multiplicity {protocol.multiplicity}; rules: "
        + "; ".join(f"{r.metric} ({r.unit}) [{r.lower}, {r.upper}]" for r in protocol.rules)
    )
    model = null_model(protocol, clusters=args.clusters_per_month)
    print(
        f"{D} simulated deployments: {SITES} sites x {MONTHS} monthly looks, {args.clusters_per_month} lesion "
        f"clusters per site and month (about {2.5 * args.clusters_per_month:.0f} images), true gap "
        f"{model.gap} (on the bound), intervention rate {model.intervention_rate}; slices: each site and all "
        f"sites pooled; {len(protocol.rules)} rules: {(SITES + 1) * len(protocol.rules)} hypotheses per deployment"
    )

    started = time.perf_counter()
    null = decide(model, protocol, D, args.seed)
    null_seconds = time.perf_counter() - started
    analyses = D * (SITES + 1) * MONTHS
    mask = null_hypotheses(model, protocol)
    assert mask.all(), "the null deployment must keep every rule's true value within its bounds"
    mc = math.sqrt(protocol.alpha * (1 - protocol.alpha) / D)
    rows = []
    for name, method in zip(METHODS, ("naive", "cs", "corrected")):
        share = null.any_alert(method, mask).mean()
        own = math.sqrt(share * (1 - share) / D)
        verdict = ("goal met" if share <= protocol.alpha + mc else "goal NOT met") if method == "corrected" else ""
        rows.append([f"({'abc'[len(rows)]}) {name}", f"{int(share * D)}/{D}", f"{share:.3f} +- {own:.3f}", verdict])
    print(
        f"\nNull deployments: share with any false alert over {MONTHS} looks (goal for (c): <= alpha + its "
        f"Monte Carlo error = {protocol.alpha} + {mc:.4f} = {protocol.alpha + mc:.4f}); {analyses:,} looks "
        "decided in "
        f"{null_seconds:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in null.seconds.items()) + ")"
    )
    print(machine_line())
    print_table(["method", "deployments", "share +- s.e.", ""], rows)

    drift_model = null_model(protocol, clusters=args.clusters_per_month, drifts=(DRIFT,))
    started = time.perf_counter()
    drifted = decide(drift_model, protocol, D, args.seed + 1)
    drift_seconds = time.perf_counter() - started
    drift_mask = null_hypotheses(drift_model, protocol)
    site, start = drift_model.drifts[0].site - 1, drift_model.drifts[0].start
    rule = next(i for i, r in enumerate(protocol.rules) if r.metric == "Delta_authority")
    delay = delays(drifted, site, rule, start)
    found = ~np.isnan(delay)
    rows = []
    for name, method in zip(METHODS, ("naive", "cs", "corrected")):
        alerts = getattr(drifted, method)[:, site, rule, start - 1 :]
        first = np.where(alerts.any(axis=1), np.argmax(alerts, axis=1) + 1.0, np.nan)
        hit = ~np.isnan(first)
        rows.append(
            [
                f"({'abc'[len(rows)]}) {name}",
                f"{hit.mean():.3f}",
                f"{np.median(first[hit]):.0f}" if hit.any() else "none",
                f"{drifted.any_alert(method, drift_mask).mean():.3f}",
            ]
        )
    print(
        f"\nPlanted drift ({DRIFT}: the gap {drift_model.gap} -> {drift_model.gap - 0.5} from month {start}, "
        f"0.5 simulator units past the bound): decided in {drift_seconds:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in drifted.seconds.items())
        + ")"
    )
    print(machine_line())
    print_table(["method", "detected by month 24", "median delay (months)", "false alerts elsewhere"], rows)
    if found.any():
        print(
            f"  (c): delay quartiles {np.nanpercentile(delay, 25):.0f} / {np.nanpercentile(delay, 50):.0f} / "
            f"{np.nanpercentile(delay, 75):.0f} months; 1 = alerted at the look of month {start}"
        )

    if args.case_mix_deployments:
        print_case_mix(protocol, args.case_mix_deployments, args.case_mix_drift, args.clusters_per_month, args.seed + 2)

    if not args.skip_look:
        print_looks(args)


if __name__ == "__main__":
    main()
