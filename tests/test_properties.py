"""Property tests: Delta = p * delta per replicate, invariance to row order and cluster names."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autheval.estimation.estimators import estimate
from autheval.records.read import records_from_table

ACTIONS = ["a0", "a1", "a2", "a3"]


@st.composite
def logs(draw):
    n = draw(st.integers(min_value=2, max_value=40))
    n_clusters = draw(st.integers(min_value=1, max_value=n))
    rows = []
    for i in range(n):
        proposed = draw(st.sampled_from(ACTIONS))
        changed = draw(st.booleans())
        executed = draw(st.sampled_from(ACTIONS)) if changed else proposed
        u_exec = draw(st.floats(min_value=-10, max_value=0, allow_nan=False, width=32))
        u_prop = u_exec if executed == proposed else draw(st.floats(min_value=-10, max_value=0, width=32))
        rows.append(
            {
                "case_id": f"case{i:03d}",
                "cluster_id": f"k{draw(st.integers(0, n_clusters - 1)):03d}",
                "proposed_action": proposed,
                "executed_action": executed,
                "utility_executed_local": float(u_exec),
                "utility_proposed_local": float(u_prop),
            }
        )
    return rows


def records(rows, name="log"):
    return records_from_table(pa.Table.from_pylist(rows), name, name, "0" * 64)


def points(result, analysis="log"):
    return {(r["unit"], r["metric"]): r["estimate"] for r in result.estimates if r["analysis"] == analysis}


def close(a, b, tol=1e-12):
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= tol * max(1.0, abs(a)))


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(logs(), st.sampled_from(["reference", "poisson"]))
def test_gap_equals_rate_times_delta_on_every_replicate(rows, scheme):
    result = estimate([records(rows)], scheme=scheme, reps=100)
    for unit in ("image_weighted", "cluster_equal"):
        check = result.check("log", unit)
        if check is not None:
            assert check["point_residual"] <= 1e-12
            assert check["max_replicate_residual"] <= 1e-12


@SETTINGS
@given(logs(), st.randoms(use_true_random=False), st.sampled_from(["reference", "evaluator", "poisson"]))
def test_row_order_does_not_change_any_number(rows, rnd, scheme):
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    a = estimate([records(rows)], scheme=scheme, reps=100)
    b = estimate([records(shuffled)], scheme=scheme, reps=100)
    for x, y in zip(a.estimates, b.estimates):
        for key in ("estimate", "ci_lower", "ci_upper"):
            assert close(x[key], y[key]), (x, y)


@SETTINGS
@given(logs(), st.randoms(use_true_random=False))
def test_cluster_names(rows, rnd):
    """Renaming clusters keeps every point estimate; an order-keeping renaming keeps every interval."""
    names = sorted({r["cluster_id"] for r in rows})
    shuffled = names[:]
    rnd.shuffle(shuffled)
    anywise = {old: f"z-{new}" for old, new in zip(names, shuffled)}
    in_order = {old: f"lesion/{old}" for old in names}
    base = estimate([records(rows)], reps=100)
    renamed = estimate([records([{**r, "cluster_id": anywise[r["cluster_id"]]} for r in rows])], reps=100)
    for key, value in points(base).items():
        assert close(value, points(renamed)[key]), key
    ordered = estimate([records([{**r, "cluster_id": in_order[r["cluster_id"]]} for r in rows])], reps=100)
    for x, y in zip(base.estimates, ordered.estimates):
        for key in ("estimate", "ci_lower", "ci_upper"):
            assert close(x[key], y[key]), (x, y)


def test_identity_check_catches_a_broken_replicate():
    """The check really compares the numbers: a replicate whose gap is off by 0.1 is reported."""
    import duckdb

    from warehouse.sql import load_sql

    con = duckdb.connect()
    rows = [
        {
            "analysis": "x",
            "unit": "image_weighted",
            "rep": rep,
            "Delta_authority": gap,
            "intervention_rate": p,
            "delta": d,
        }
        for rep, (gap, p, d) in {-1: (0.25, 0.5, 0.5), 0: (0.35, 0.5, 0.5), 1: (0.0, 0.0, None)}.items()
    ]
    con.register("replicate_metrics", pa.Table.from_pylist(rows))
    (check,) = con.execute(load_sql("estimates/identity_check")).fetchall()
    assert check[2] == 0.0 and abs(check[3] - 0.1) < 1e-12 and check[4] == 1


def test_identity_check_catches_a_gap_below_p_times_delta():
    """A residual is a distance: a point or replicate gap 0.1 *below* p * delta is reported as 0.1."""
    import duckdb

    from warehouse.sql import load_sql

    con = duckdb.connect()
    rows = [
        {
            "analysis": "x",
            "unit": "cluster_equal",
            "rep": rep,
            "Delta_authority": gap,
            "intervention_rate": p,
            "delta": d,
        }
        for rep, (gap, p, d) in {-1: (0.15, 0.5, 0.5), 0: (0.25, 0.5, 0.5), 1: (0.05, 0.5, 0.3)}.items()
    ]
    con.register("replicate_metrics", pa.Table.from_pylist(rows))
    (check,) = con.execute(load_sql("estimates/identity_check")).fetchall()
    assert abs(check[2] - 0.1) < 1e-12 and abs(check[3] - 0.1) < 1e-12 and check[4] == 0


def contrast_arm(name, cluster_sizes, gap=-1.0):
    """A full log with the given number of cases per cluster (every second case changed)."""
    rows, i = [], 0
    for c, size in enumerate(cluster_sizes):
        for _ in range(size):
            changed = i % 2 == 0
            rows.append(
                {
                    "case_id": f"case{i}",
                    "cluster_id": f"k{c}",
                    "proposed_action": "a1",
                    "executed_action": "a0" if changed else "a1",
                    "utility_executed_local": 0.0,
                    "utility_proposed_local": gap if changed else 0.0,
                }
            )
            i += 1
    return records_from_table(pa.Table.from_pylist(rows), name, name, "0" * 64)


def test_paired_contrast_needs_identical_case_counts():
    """Same cluster ids are not enough: a cluster with another number of cases in one arm is refused."""
    import pytest

    from autheval.errors import RecordError

    a, b = contrast_arm("a", [2, 3, 1]), contrast_arm("b", [2, 3, 1], gap=-2.0)
    result = estimate([a, b], reps=100, contrasts=[("a", "b")])
    assert [c["unit"] for c in result.contrasts] == ["image_weighted", "cluster_equal"]
    c = contrast_arm("c", [2, 2, 2])
    with pytest.raises(RecordError, match="identical case counts") as err:
        estimate([a, c], reps=100, contrasts=[("a", "c")])
    assert "'k1': 3 vs 2 cases" in str(err.value)
    d = contrast_arm("d", [2, 3])
    with pytest.raises(RecordError, match="'k2': 1 vs no cases"):
        estimate([a, d], reps=100, contrasts=[("a", "d")])
