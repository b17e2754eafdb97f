"""One definition per number: a bootstrap scheme changes intervals, never point estimates.

On a small full-counterfactual log with clusters of unequal size (so the two units differ), every
point estimate of every metric and unit is the same number under `reference`, `evaluator` and
`poisson` (and any seed), pinned by plain numpy; Delta = p * delta is checked on the point in both
units under every scheme; the evaluator's cluster-equal delta interval is the ratio of its own
resampled cluster-equal Delta and p, so it brackets the ratio point, not the old mean of per-cluster
deltas.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from autheval.estimation.analytic import delta_method_rows
from autheval.estimation.estimators import METRICS, SCHEMES, UNITS, estimate
from autheval.records.read import records_from_table
from tests.conftest import run_cli

# 20 rows in 5 clusters of 2..6 cases; changes concentrated in the small clusters, so the cluster-equal
# delta (cluster-equal Delta / cluster-equal p) and the mean of the per-cluster deltas differ.
SIZES = {"k1": 2, "k2": 3, "k3": 4, "k4": 5, "k5": 6}
CHANGED = {"k1": 2, "k2": 1, "k3": 2, "k4": 1, "k5": 1}
GAPS = [1.5, 0.5, 1.0, 2.0, 0.25, 3.0, 0.75]  # one per changed case, in row order


def log_rows() -> list[dict]:
    rows, gaps = [], iter(GAPS)
    for cluster, size in SIZES.items():
        for i in range(size):
            changed = i < CHANGED[cluster]
            u_exec = -1.0 - 0.5 * (i % 3)
            rows.append(
                {
                    "case_id": f"{cluster}-{i}",
                    "cluster_id": cluster,
                    "proposed_action": "a1",
                    "executed_action": "a2" if changed else "a1",
                    "utility_executed_local": u_exec,
                    "utility_proposed_local": u_exec + next(gaps) if changed else u_exec,
                }
            )
    return rows


def log_records():
    return records_from_table(pa.Table.from_pylist(log_rows()), "log", "log", "0" * 64)


def numpy_points() -> dict[tuple[str, str], float]:
    """(unit, metric) -> the point, from the rows with plain numpy (no SQL)."""
    rows = log_rows()
    k = np.array([r["cluster_id"] for r in rows])
    exe = np.array([r["utility_executed_local"] for r in rows])
    prop = np.array([r["utility_proposed_local"] for r in rows])
    changed = np.array([r["proposed_action"] != r["executed_action"] for r in rows], dtype=float)
    values = {"J": exe, "intervention_rate": changed, "J_auth": prop, "Delta_authority": prop - exe}
    out = {}
    for metric, v in values.items():
        out[("image_weighted", metric)] = v.mean()
        out[("cluster_equal", metric)] = np.mean([v[k == c].mean() for c in SIZES])
    for unit in UNITS:
        out[(unit, "delta")] = out[(unit, "Delta_authority")] / out[(unit, "intervention_rate")]
    return out


@pytest.fixture(scope="module")
def by_scheme():
    records = log_records()
    runs = {scheme: estimate([records], scheme=scheme, reps=400) for scheme in SCHEMES}
    runs["evaluator, another seed"] = estimate([records], scheme="evaluator", reps=400, seed=7)
    runs["poisson, another seed"] = estimate([records], scheme="poisson", reps=400, seed=7)
    return runs


def test_the_log_tells_the_two_cluster_equal_deltas_apart():
    """Guard: on this log the old evaluator value (mean of per-cluster deltas) is another number."""
    points = numpy_points()
    per_cluster = np.mean([sum(GAPS[i] for i in idx) / len(idx) for idx in ([0, 1], [2], [3, 4], [5], [6])])
    assert abs(per_cluster - points[("cluster_equal", "delta")]) > 0.05
    assert abs(points[("image_weighted", "delta")] - points[("cluster_equal", "delta")]) > 0.05


def test_every_point_estimate_is_the_same_under_every_scheme(by_scheme):
    expected = numpy_points()
    reference = by_scheme["reference"]
    for name, result in by_scheme.items():
        for unit in UNITS:
            for metric in METRICS:
                ours, theirs = result.estimate("log", unit, metric), reference.estimate("log", unit, metric)
                assert ours["estimate"] == theirs["estimate"], (name, unit, metric)  # the same bits
                assert ours["available"] == theirs["available"] and ours["n"] == theirs["n"]
                if (unit, metric) in expected:
                    assert ours["estimate"] == pytest.approx(expected[(unit, metric)], rel=1e-13, abs=1e-15)


def test_intervals_do_depend_on_the_scheme(by_scheme):
    """Guard: the schemes really ran different bootstraps (only the points are shared)."""
    ends = {name: r.estimate("log", "cluster_equal", "delta")["ci_lower"] for name, r in by_scheme.items()}
    assert len(set(ends.values())) == len(ends)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_identity_is_checked_in_both_units_under_every_scheme(by_scheme, scheme):
    result = by_scheme[scheme]
    assert [c["unit"] for c in result.checks] == sorted(UNITS)
    for check in result.checks:
        assert check["point_residual"] <= 1e-12
        if scheme == "evaluator":  # per-metric streams: no replicate identity to check
            assert check["max_replicate_residual"] is None
        else:
            assert check["max_replicate_residual"] <= 1e-12


def test_the_evaluator_cluster_equal_delta_interval_is_the_ratio_on_deltas_stream(by_scheme):
    """Its replicates: delta's own stream (seed + 4) over the clusters with a change, the drawn
    clusters' gap / n_c summed over their changed / n_c summed (an independent loop)."""
    rows = log_rows()
    names = [c for c in SIZES if CHANGED[c]]  # every cluster has a change here; ascending id
    gap = {
        c: sum(r["utility_proposed_local"] - r["utility_executed_local"] for r in rows if r["cluster_id"] == c)
        for c in names
    }
    m = np.array([gap[c] / SIZES[c] for c in names])
    w = np.array([CHANGED[c] / SIZES[c] for c in names])
    rng = np.random.default_rng(20260710 + 4)
    draws = []
    for _ in range(400):
        idx = rng.integers(0, len(names), size=len(names))
        draws.append(m[idx].sum() / w[idx].sum())
    lo, hi = np.quantile(draws, [0.025, 0.975])
    row = by_scheme["evaluator"].estimate("log", "cluster_equal", "delta")
    assert row["ci_lower"] == pytest.approx(lo, rel=1e-12) and row["ci_upper"] == pytest.approx(hi, rel=1e-12)
    assert row["ci_lower"] <= row["estimate"] <= row["ci_upper"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_delta_method_shares_the_points(by_scheme, scheme):
    for row in delta_method_rows([log_records()]):
        boot = by_scheme[scheme].estimate("log", row["unit"], row["metric"])
        if boot["available"]:
            assert row["estimate"] == pytest.approx(boot["estimate"], rel=1e-12, abs=1e-15), (
                row["unit"],
                row["metric"],
            )


def test_summary_json_checks_both_units_under_the_evaluator(tmp_path):
    path = tmp_path / "log.csv"
    columns = list(log_rows()[0])
    path.write_text(
        ",".join(columns) + "\n" + "\n".join(",".join(str(r[c]) for c in columns) for r in log_rows()) + "\n"
    )
    result = run_cli(
        "evaluate",
        "--input",
        str(path),
        "--scheme",
        "evaluator",
        "--reps",
        "1000",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sorted(summary["checks"]) == sorted(UNITS)
    assert all(c["identity_residual"] <= 1e-12 for c in summary["checks"].values())
    cluster = summary["units"]["cluster_equal"]
    ratio = cluster["Delta_authority"]["estimate"] / cluster["intervention_rate"]["estimate"]
    assert cluster["delta"]["estimate"] == pytest.approx(ratio, rel=1e-15)
