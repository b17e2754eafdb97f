"""The authority-gap estimators: point estimates and whole-cluster bootstrap intervals.

Python only orchestrates; the statistics are the SQL files in `sql/`:
cluster_stats -> (cluster_vectors + numpy multiplicities | poisson weights) -> replicate sums ->
replicate_metrics -> intervals, identity_check, paired_contrast.

Schemes (declared on every output row):
* reference: AuthEval's analysis scheme, bit-compatible with its published intervals (one shared
  numpy stream for every metric, unit and analysis with the same cluster count; seed 20260711).
* evaluator: AuthEval's generic log evaluator (seed 20260710 + a per-metric offset; delta resampled
  over intervened rows only).
* poisson: Poisson(1) cluster weights hashed inside SQL; constant memory; a different
  (asymptotically equivalent) bootstrap for logs too large for the exact schemes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import duckdb
import pyarrow as pa

from autheval.bootstrap import multiplicity_blocks, multiplicity_table
from autheval.errors import RecordError
from autheval.records import FULL, PROPOSAL_ONLY, RecordSet
from warehouse.sql import load_sql

SCHEMES = ("reference", "evaluator", "poisson")
DEFAULT_SEEDS = {"reference": 20260711, "evaluator": 20260710, "poisson": 20260711}
DEFAULT_REPS = 5000
DEFAULT_QUANTILES = (0.025, 0.975)
METRICS = (
    "J",
    "intervention_rate",
    "J_auth",
    "Delta_authority",
    "delta",
    "J_std",
    "Delta_total",
    "Delta_utility",
)
UNITS = ("image_weighted", "cluster_equal")

NO_LOCAL = "utility_proposed_local not supplied"
NO_GLOBAL = "utility_proposed_global not supplied"
NO_CHANGE = "no interventions observed"
NO_SELECTION = "executed_action not supplied (proposal-only record)"


@dataclass(frozen=True)
class Availability:
    available: bool
    status: str  # 'estimated' | 'not_recoverable' | 'undefined' | 'not_supplied'
    reason: str | None = None


def availability(records: RecordSet, metric: str) -> Availability:
    """Which numbers a record level supports (AuthEval 6.8), with the reason when it does not."""
    ok = Availability(True, "estimated")
    proposal_only = records.level == PROPOSAL_ONLY
    if metric in ("J", "intervention_rate"):
        return Availability(False, "not_recoverable", NO_SELECTION) if proposal_only else ok
    if metric == "J_auth":
        return ok if records.has_local else Availability(False, "not_recoverable", NO_LOCAL)
    if metric == "Delta_authority":
        if proposal_only:
            return Availability(False, "not_recoverable", NO_SELECTION)
        if records.level == FULL or records.n_changed == 0:
            return ok  # p = 0 identifies Delta = 0 without the proposal's score
        return Availability(False, "not_recoverable", NO_LOCAL)
    if metric == "delta":
        if proposal_only:
            return Availability(False, "not_recoverable", NO_SELECTION)
        if not records.has_local:
            return Availability(False, "not_recoverable", NO_LOCAL)
        return ok if records.n_changed > 0 else Availability(False, "undefined", NO_CHANGE)
    if metric == "J_std":
        return ok if records.has_global else Availability(False, "not_supplied", NO_GLOBAL)
    if metric == "Delta_total":
        if not records.has_global:
            return Availability(False, "not_supplied", NO_GLOBAL)
        return Availability(False, "not_recoverable", NO_SELECTION) if proposal_only else ok
    if metric == "Delta_utility":
        if not records.has_global:
            return Availability(False, "not_supplied", NO_GLOBAL)
        return ok if records.has_local else Availability(False, "not_recoverable", NO_LOCAL)
    raise KeyError(metric)


@dataclass
class EstimationResult:
    """Long estimate rows, the Delta = p * delta checks, and paired contrasts."""

    scheme: str
    reps: int
    seed: int
    quantiles: tuple[float, float]
    records: dict[str, RecordSet]
    estimates: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    contrasts: list[dict] = field(default_factory=list)

    def estimate(self, analysis: str, unit: str, metric: str) -> dict:
        for row in self.estimates:
            if (row["analysis"], row["unit"], row["metric"]) == (analysis, unit, metric):
                return row
        raise KeyError((analysis, unit, metric))

    def check(self, analysis: str, unit: str) -> dict | None:
        for row in self.checks:
            if (row["analysis"], row["unit"]) == (analysis, unit):
                return row
        return None


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> list[dict]:
    cursor = con.execute(sql, params or {})
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _exact_replicates(con: duckdb.DuckDBPyConnection, query: str, streams, reps: int) -> pa.Table:
    """Run a dot-product replicate query once per stream and block of multiplicities."""
    parts = []
    sql = load_sql(query)
    for seed, n_clusters, params in streams:
        for first_rep, counts in multiplicity_blocks(seed, n_clusters, reps):
            con.register("boot_multiplicities", multiplicity_table(seed, n_clusters, first_rep, counts))
            parts.append(con.execute(sql, params).arrow().read_all())
            con.unregister("boot_multiplicities")
    return pa.concat_tables(parts) if parts else None


def _replicate_metrics(con, scheme: str, reps: int, seed: int) -> None:
    """Create the temp table replicate_metrics(analysis, rep, unit, metric, value)."""
    if scheme == "evaluator":
        con.execute(f"CREATE OR REPLACE TEMP TABLE evaluator_vectors AS {load_sql('evaluator_vectors')}")
        keys = con.execute(
            "SELECT DISTINCT seed_offset, n_clusters FROM evaluator_vectors ORDER BY ALL"
        ).fetchall()
        streams = [(seed + offset, g, {"seed": seed}) for offset, g in keys]
        parts = _exact_replicates(con, "evaluator_replicates", streams, reps)
        con.register("replicate_parts", parts)
        con.execute("CREATE OR REPLACE TEMP TABLE replicate_metrics AS SELECT * FROM replicate_parts")
        con.unregister("replicate_parts")
        return
    point = con.execute(load_sql("replicates_point")).arrow().read_all()
    if scheme == "reference":
        con.execute(f"CREATE OR REPLACE TEMP TABLE cluster_vectors AS {load_sql('cluster_vectors')}")
        sizes = con.execute("SELECT DISTINCT n_clusters FROM cluster_vectors ORDER BY 1").fetchall()
        replicates = _exact_replicates(con, "replicates_exact", [(seed, g, {}) for (g,) in sizes], reps)
    else:
        replicates = con.execute(load_sql("replicates_poisson"), {"reps": reps, "seed": seed}).arrow().read_all()
    replicates = replicates.cast(point.schema) if replicates is not None else point.slice(0, 0)
    con.register("replicate_sums", pa.concat_tables([point, replicates]))
    con.execute(f"CREATE OR REPLACE TEMP TABLE replicate_metrics AS {load_sql('replicate_metrics')}")
    con.unregister("replicate_sums")


def estimate(
    recordsets: Sequence[RecordSet],
    scheme: str = "reference",
    reps: int = DEFAULT_REPS,
    seed: int | None = None,
    quantiles: tuple[float, float] = DEFAULT_QUANTILES,
    contrasts: Sequence[tuple[str, str]] = (),
) -> EstimationResult:
    """Estimate every metric in both units for each record set, and the paired contrasts."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
    if reps <= 0:
        raise ValueError("reps must be positive")
    lower, upper = quantiles
    if not 0.0 <= lower < upper <= 1.0:
        raise ValueError("quantiles must satisfy 0 <= lower < upper <= 1")
    seed = DEFAULT_SEEDS[scheme] if seed is None else int(seed)
    by_name = {r.analysis: r for r in recordsets}
    if len(by_name) != len(recordsets):
        raise ValueError("analysis names must be unique")

    con = duckdb.connect()
    con.register("records_in", pa.concat_tables([r.table for r in recordsets]))
    con.execute("CREATE TEMP TABLE records AS SELECT * FROM records_in")
    con.execute(f"CREATE TEMP TABLE cluster_stats AS {load_sql('cluster_stats')}")
    _replicate_metrics(con, scheme, reps, seed)
    q = {"lower": lower, "upper": upper}
    result = EstimationResult(scheme, reps, seed, (lower, upper), by_name)

    for row in _rows(con, load_sql("intervals"), q):
        records = by_name[row["analysis"]]
        avail = availability(records, row["metric"])
        n = records.n_changed if row["metric"] == "delta" else records.n_cases
        keep = avail.available
        result.estimates.append(
            {
                "analysis": row["analysis"],
                "unit": row["unit"],
                "metric": row["metric"],
                "estimate": row["estimate"] if keep else None,
                "ci_lower": row["ci_lower"] if keep else None,
                "ci_upper": row["ci_upper"] if keep else None,
                "n": n if keep else 0,
                "n_clusters": records.n_clusters,
                "available": keep,
                "status": avail.status,
                "reason": avail.reason,
                "reps_undefined": row["reps_undefined"] if keep else None,
            }
        )
    order = {(m, u): i for i, (u, m) in enumerate((u, m) for u in UNITS for m in METRICS)}
    result.estimates.sort(key=lambda r: (r["analysis"], order[(r["metric"], r["unit"])]))

    for row in _rows(con, load_sql("identity_check")):
        records = by_name[row["analysis"]]
        if availability(records, "delta").available or records.level == FULL:
            if scheme == "evaluator":  # per-metric streams: only the point identity is defined
                row["max_replicate_residual"] = None
                if row["unit"] == "cluster_equal":
                    continue
            result.checks.append(row)

    if contrasts:
        result.contrasts = _paired_contrasts(con, by_name, contrasts, q)
    return result


def _paired_contrasts(con, by_name, contrasts, q) -> list[dict]:
    pairs = []
    for arm_a, arm_b in contrasts:
        for arm in (arm_a, arm_b):
            if arm not in by_name:
                raise RecordError("--contrast", None, f"unknown arm {arm!r} (arms: {', '.join(by_name)})")
            if not availability(by_name[arm], "Delta_authority").available:
                raise RecordError(by_name[arm].source, "utility_proposed_local", "Delta_authority is not recoverable, so no contrast")
        pairs.append({"contrast": f"{arm_a} minus {arm_b}", "arm_a": arm_a, "arm_b": arm_b})
    con.register("contrast_pairs", pa.Table.from_pylist(pairs))
    mismatch = _rows(con, load_sql("paired_clusters_mismatch"))
    if mismatch:
        first = mismatch[0]
        raise RecordError(
            first["contrast"],
            "cluster_id",
            "a paired contrast needs identical clusters with identical case counts in both arms",
            f"cluster {first['cluster_id']!r}: {first['n_arm_a']} vs {first['n_arm_b']} cases",
        )
    rows = _rows(con, load_sql("paired_contrast"), q)
    unit_order = {u: i for i, u in enumerate(UNITS)}
    contrast_order = {p["contrast"]: i for i, p in enumerate(pairs)}
    rows.sort(key=lambda r: (contrast_order[r["contrast"]], unit_order[r["unit"]]))
    for row in rows:
        row["excludes_zero"] = bool(row["ci_lower"] > 0 or row["ci_upper"] < 0)
    return rows
