"""Every asset check's SQL, fed a good table and bad ones: each bad table must fail the check.

The checks run here on DuckDB directly with the tables registered under the names the assets give
them (the assets read these tables from the lake through `assets.common.check_row`); the pass rules are
the assets' (violations == 0, residual <= 1e-12, published summary: 6 compared, none missing, 1e-12).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.reference_data import reference_path
from warehouse.sql import connect, load_sql


def run_check(name: str, **tables: pa.Table) -> dict:
    con = connect()
    for table_name, table in tables.items():
        con.register(table_name, table)
    cursor = con.execute(load_sql(name))
    names = [d[0] for d in cursor.description]
    rows = cursor.fetchall()
    assert len(rows) == 1, rows
    return dict(zip(names, rows[0]))


def rows(**columns) -> pa.Table:
    return pa.table(columns)


# --- unique image ids --------------------------------------------------------------------------


def test_unique_images():
    assert run_check("ingest/check_unique_images", checked=rows(image_id=["a", "b", "c"]))["duplicates"] == 0
    bad = run_check("ingest/check_unique_images", checked=rows(image_id=["a", "b", "b", "c"]))
    assert bad["duplicates"] == 1 and bad["example"] == "b"


# --- no cluster crosses a split ------------------------------------------------------------------


def clusters(*triples) -> pa.Table:
    return rows(image_id=[t[0] for t in triples], cluster_id=[t[1] for t in triples], split=[t[2] for t in triples])


def test_cluster_in_two_splits_fails():
    good = clusters(("i1", "k1", "train"), ("i2", "k1", "train"), ("i3", "k2", "test"))
    assert run_check("duplicates/check_cluster_splits", clusters=good)["violations"] == 0
    bad = clusters(
        ("i1", "k1", "train"),
        ("i2", "k1", "test"),
        ("i3", "k2", "test"),
        ("i4", "k3", "val"),
        ("i5", "k3", "train"),
        ("i6", "k3", "test"),
    )
    row = run_check("duplicates/check_cluster_splits", clusters=bad)
    assert row["violations"] == 2 and row["example"] == "k1"


# --- cluster context constant ------------------------------------------------------------------


def images(*pairs) -> pa.Table:
    return rows(image_id=[p[0] for p in pairs], risk_stratum=pa.array([p[1] for p in pairs], pa.string()))


def test_cluster_context_constant():
    good_clusters = clusters(("i1", "k1", "train"), ("i2", "k1", "train"), ("i3", "k2", "test"))
    good_images = images(("i1", "high"), ("i2", "high"), ("i3", "low"))
    assert run_check("context/check_cluster_context", clusters=good_clusters, images=good_images)["violations"] == 0
    # a split that differs within a cluster
    split_mix = clusters(("i1", "k1", "train"), ("i2", "k1", "val"), ("i3", "k2", "test"))
    row = run_check("context/check_cluster_context", clusters=split_mix, images=good_images)
    assert row["violations"] == 1 and row["example"] == "k1"
    # a reference state that differs within a cluster
    risk_mix = images(("i1", "high"), ("i2", "low"), ("i3", "low"))
    row = run_check("context/check_cluster_context", clusters=good_clusters, images=risk_mix)
    assert row["violations"] == 1 and row["example"] == "k1"


# --- Delta = p * delta on the estimates ----------------------------------------------------------


def estimate_rows(analysis, unit, gap, p, d, scheme="reference"):
    return [
        {"analysis": analysis, "unit": unit, "metric": "Delta_authority", "estimate": gap, "scheme": scheme},
        {"analysis": analysis, "unit": unit, "metric": "intervention_rate", "estimate": p, "scheme": scheme},
        {"analysis": analysis, "unit": unit, "metric": "delta", "estimate": d, "scheme": scheme},
        {"analysis": analysis, "unit": unit, "metric": "J", "estimate": -1.0, "scheme": scheme},
    ]


def identity(estimates: list[dict]) -> dict:
    row = run_check("estimates/check_estimates_identity", estimates=pa.Table.from_pylist(estimates))
    row["passed"] = row["max_residual"] <= 1e-12
    return row


def test_identity_residual_check():
    good = estimate_rows("a", "image_weighted", 0.25, 0.5, 0.5) + estimate_rows("a", "cluster_equal", 0.3, 0.6, 0.5)
    good += estimate_rows("b", "image_weighted", 0.0, 0.0, None)  # no change: delta undefined, not compared
    assert identity(good)["passed"] and identity(good)["pairs"] == 2
    too_big = good + estimate_rows("c", "image_weighted", 0.26, 0.5, 0.5)
    row = identity(too_big)
    assert not row["passed"] and abs(row["max_residual"] - 0.01) < 1e-12
    # a gap below p * delta is as wrong as one above it (the residual is an absolute value)
    too_small = good + estimate_rows("c", "cluster_equal", 0.24, 0.5, 0.5)
    row = identity(too_small)
    assert not row["passed"] and abs(row["max_residual"] - 0.01) < 1e-12


@pytest.mark.parametrize("unit", ["image_weighted", "cluster_equal"])
@pytest.mark.parametrize("scheme", ["reference", "evaluator", "poisson"])
def test_identity_check_covers_every_scheme_and_unit(scheme, unit):
    """A scheme changes intervals only, so the point identity is checked under every scheme, both units."""
    assert identity(estimate_rows("e", unit, 0.25, 0.5, 0.5, scheme=scheme))["passed"]
    checked = estimate_rows("e", unit, 0.3, 0.5, 0.5, scheme=scheme)
    assert identity(checked)["pairs"] == 1 and not identity(checked)["passed"]


# --- the record level supports every reported number ---------------------------------------------


def supported_row(**overrides) -> dict:
    row = {
        "analysis": "a",
        "unit": "image_weighted",
        "metric": "J",
        "estimate": -1.0,
        "ci_lower": -1.5,
        "ci_upper": -0.5,
        "available": True,
        "reason": None,
        "record_level": "full_counterfactual",
    }
    row.update(overrides)
    return row


SUPPORTED_GOOD = [
    supported_row(),
    supported_row(metric="J_auth"),
    supported_row(metric="delta", estimate=None, ci_lower=None, ci_upper=None),  # undefined in a unit
    supported_row(
        metric="J_auth",
        record_level="role_separated",
        available=False,
        estimate=None,
        ci_lower=None,
        ci_upper=None,
        reason="utility_proposed_local not supplied",
    ),
    supported_row(metric="Delta_authority", record_level="role_separated", estimate=0.0, ci_lower=0.0, ci_upper=0.0),
    supported_row(metric="J_std", record_level="proposal_only"),
    supported_row(
        metric="J",
        record_level="proposal_only",
        available=False,
        estimate=None,
        ci_lower=None,
        ci_upper=None,
        reason="executed_action not supplied (proposal-only record)",
    ),
]

SUPPORTED_BAD = {
    "unavailable with a number": supported_row(available=False, reason="x"),
    "unavailable with an interval only": supported_row(available=False, estimate=None, reason="x"),
    "unavailable without a reason": supported_row(available=False, estimate=None, ci_lower=None, ci_upper=None),
    "available without a number": supported_row(estimate=None),
    "J_auth of a role-separated record": supported_row(metric="J_auth", record_level="role_separated"),
    "delta of a role-separated record": supported_row(metric="delta", record_level="role_separated"),
    "Delta_utility of a proposal-only record": supported_row(metric="Delta_utility", record_level="proposal_only"),
    "a non-zero gap of a role-separated record": supported_row(
        metric="Delta_authority", record_level="role_separated", estimate=0.1
    ),
    "J of a proposal-only record": supported_row(metric="J", record_level="proposal_only"),
    "p of a proposal-only record": supported_row(metric="intervention_rate", record_level="proposal_only"),
}


def supported(estimates: list[dict]) -> dict:
    schema = pa.schema(
        [
            ("analysis", pa.string()),
            ("unit", pa.string()),
            ("metric", pa.string()),
            ("estimate", pa.float64()),
            ("ci_lower", pa.float64()),
            ("ci_upper", pa.float64()),
            ("available", pa.bool_()),
            ("reason", pa.string()),
            ("record_level", pa.string()),
        ]
    )
    return run_check("estimates/check_estimates_supported", estimates=pa.Table.from_pylist(estimates, schema=schema))


def test_supported_numbers_pass():
    assert supported(SUPPORTED_GOOD)["violations"] == 0


@pytest.mark.parametrize("label", list(SUPPORTED_BAD))
def test_unsupported_numbers_fail(label):
    row = supported([*SUPPORTED_GOOD, {**SUPPORTED_BAD[label], "analysis": "bad"}])
    assert row["violations"] == 1 and row["example"].startswith("bad / "), label


# --- the control heads equal the frozen heads ----------------------------------------------------


FROZEN = rows(image_id=["i1", "i2"], llava_med_head=["A", "B"], clip_probe_head=["C", "D"])


def proposals(*triples) -> pa.Table:
    return pa.table(
        {
            "mechanism": [t[0] for t in triples],
            "image_id": [t[1] for t in triples],
            "a_head": pa.array([t[2] for t in triples], pa.string()),
        }
    )


GOOD_HEADS = [
    ("LLaVA-Med head", "i1", "A"),
    ("LLaVA-Med head", "i2", "B"),
    ("CLIP probe", "i1", "C"),
    ("CLIP probe", "i2", "D"),
    ("MedGemma readout", "i1", "Z"),
]


def frozen_heads(table: pa.Table) -> dict:
    return run_check("proposals/check_frozen_heads", proposals=table, frozen_heads=FROZEN)


def test_frozen_heads_pass():
    assert frozen_heads(proposals(*GOOD_HEADS))["violations"] == 0


@pytest.mark.parametrize(
    "label,heads,example",
    [
        ("a different head", [*GOOD_HEADS[:3], ("CLIP probe", "i2", "X"), GOOD_HEADS[4]], "CLIP probe / i2"),
        ("a missing proposal", GOOD_HEADS[1:], "LLaVA-Med head / i1"),
        ("an empty head", [("LLaVA-Med head", "i1", None), *GOOD_HEADS[1:]], "LLaVA-Med head / i1"),
    ],
)
def test_frozen_heads_fail(label, heads, example):
    row = frozen_heads(proposals(*heads))
    assert row["violations"] == 1 and row["example"] == example, label


# --- the same action implies the same score ------------------------------------------------------


def same_action(*cases) -> dict:
    """cases: (a_head, a_sel, u_local_head, u_local_sel)"""
    ids = [f"i{i}" for i in range(len(cases))]
    selections = pa.table(
        {
            "analysis": ["x"] * len(cases),
            "image_id": ids,
            "a_head": [c[0] for c in cases],
            "a_sel": [c[1] for c in cases],
        }
    )
    scores = pa.table(
        {
            "analysis": ["x"] * len(cases),
            "image_id": ids,
            "u_local_head": pa.array([c[2] for c in cases], pa.float64()),
            "u_local_sel": pa.array([c[3] for c in cases], pa.float64()),
        }
    )
    return run_check("scoring/check_same_action_same_score", selections=selections, scores=scores)


def test_same_action_same_score():
    assert same_action(("a", "a", -1.0, -1.0), ("a", "b", -1.0, -2.0))["violations"] == 0
    assert same_action(("a", "a", -1.0, -1.5), ("a", "b", -1.0, -2.0))["violations"] == 1
    assert same_action(("a", "a", None, -1.0), ("a", "b", -1.0, -2.0))["violations"] == 1


# --- the reference analysis equals the published summary -----------------------------------------


def published_estimates(published: pa.Table) -> list[dict]:
    """Our estimates table as it must be: the published cells, in long form."""
    image = {r["estimand"]: r for r in published.to_pylist()}["image_weighted_primary"]
    cluster = {r["estimand"]: r for r in published.to_pylist()}["cluster_equal_sensitivity"]
    out = []
    for metric in ("J_auth", "J", "intervention_rate", "delta", "Delta_authority"):
        out.append(
            {
                "analysis": "mixed",
                "scheme": "reference",
                "reps": 5000,
                "unit": "image_weighted",
                "metric": metric,
                "estimate": image[metric],
                "ci_lower": image[f"{metric}_ci_lower"],
                "ci_upper": image[f"{metric}_ci_upper"],
            }
        )
    out.append(
        {
            "analysis": "mixed",
            "scheme": "reference",
            "reps": 5000,
            "unit": "cluster_equal",
            "metric": "Delta_authority",
            "estimate": cluster["Delta_authority"],
            "ci_lower": cluster["Delta_authority_ci_lower"],
            "ci_upper": cluster["Delta_authority_ci_upper"],
        }
    )
    return out


def published_check(estimates: list[dict]) -> tuple[bool, dict]:
    published = pq.read_table(reference_path("summary_mixed"))
    row = run_check("estimates/check_published_summary", estimates=pa.Table.from_pylist(estimates), published=published)
    passed = row["metrics_compared"] == 6 and row["missing"] == 0 and row["max_abs_difference"] <= 1e-12
    return passed, row


@pytest.fixture(scope="module")
def exact_estimates() -> list[dict]:
    return published_estimates(pq.read_table(reference_path("summary_mixed")))


def test_published_summary_passes_on_the_published_numbers(exact_estimates):
    passed, row = published_check(exact_estimates)
    assert passed and row["max_abs_difference"] == 0.0 and row["intervals_compared"] == 6


def test_published_intervals_are_compared_only_at_the_published_replicate_count(exact_estimates):
    """Other replicate counts change the intervals only: then the points are still compared."""
    other = [{**r, "reps": 200, "ci_lower": r["ci_lower"] - 0.1} for r in exact_estimates]
    passed, row = published_check(other)
    assert passed and row["intervals_compared"] == 0
    other[0]["estimate"] += 1e-9
    assert not published_check(other)[0]


@pytest.mark.parametrize(
    "metric,unit,column",
    [
        ("J_auth", "image_weighted", "estimate"),
        ("delta", "image_weighted", "ci_lower"),
        ("intervention_rate", "image_weighted", "ci_upper"),
        ("Delta_authority", "cluster_equal", "ci_lower"),
        ("Delta_authority", "cluster_equal", "ci_upper"),
    ],
)
def test_published_summary_fails_on_any_cell(exact_estimates, metric, unit, column):
    changed = [dict(r) for r in exact_estimates]
    for r in changed:
        if (r["metric"], r["unit"]) == (metric, unit):
            r[column] += 1e-9
    passed, row = published_check(changed)
    assert not passed and row["max_abs_difference"] > 1e-12


def test_published_summary_fails_on_a_missing_metric_or_another_scheme(exact_estimates):
    passed, row = published_check([r for r in exact_estimates if r["metric"] != "delta"])
    assert not passed and row["missing"] == 1
    other = [{**r, "scheme": "poisson"} if r["metric"] == "J" else r for r in exact_estimates]
    passed, row = published_check(other)
    assert not passed and row["missing"] == 1
