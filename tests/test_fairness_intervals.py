"""Issue 28, item 2.4: every fairness ratio carries a 95% whole-cluster bootstrap interval drawn from the
replicates of the analysis's own estimates (scheme, seed, reps and unit on the row), the report shows
"ratio [lo, hi]", and a ratio whose denominator's interval includes 0 is not estimable (no number)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from autheval.estimation.bootstrap import replicate_products
from autheval.estimation.estimators import DEFAULT_SEEDS
from autheval.estimation.subgroups import subgroup_tables
from autheval.reporting.report import build_report, markdown_report, report_queries
from autheval.reporting.report.document import ReportInputs
from tests.test_subgroups import _groups, _study
from warehouse import sql

ROLES = ("proposal", "selected")


def _fairness(records, images, contexts, grouping="sex", **kwargs) -> dict:
    out = subgroup_tables(records, images, contexts, groupings=(grouping,), **kwargs)
    [row] = out.fairness.to_pylist()
    return row


def test_each_ratio_has_an_interval_that_contains_it_and_names_how_it_was_made():
    row = _fairness(*_study(), reps=400)
    for key in (*(f"fairness_{r}" for r in ROLES), *(f"balanced_fairness_{r}" for r in ROLES)):
        lower, upper = row[f"{key}_ci_lower"], row[f"{key}_ci_upper"]
        assert lower is not None and upper is not None
        assert lower <= row[key] <= upper, key
    assert row["fairness_proposal_ci_upper"] < 1  # the planted gap: male proposals right 80%, female 50%
    assert (row["scheme"], row["seed"], row["reps"], row["unit"]) == (
        "reference",
        DEFAULT_SEEDS["reference"],
        400,
        "image_weighted",
    )
    assert row["interval_method"] == "bootstrap_reference" and row["reason"] is None
    assert (row["quantile_lower"], row["quantile_upper"]) == (0.025, 0.975)


def test_the_interval_is_the_ratio_over_the_analysis_own_resamples():
    """By hand: numpy's stream of the seed over every cluster of the analysis (ascending cluster_id), the
    multiplicities its estimates draw; in each replicate the point's worst over its best group, the pair
    held fixed; numpy's linear quantiles."""
    records, images, contexts = _study()
    row = _fairness(records, images, contexts, reps=300, seed=11)
    level = {r["image_id"]: r["ideal_action_level"] for r in images.to_pylist()}
    sex = {r["image_id"]: r["sex"] for r in images.to_pylist()}
    clusters = sorted(set(records.column("cluster_id").to_pylist()))
    rank = {c: i for i, c in enumerate(clusters)}
    matrix = np.zeros((len(clusters), 4))  # images and proposal hits of the worst, then of the best group
    for r in records.to_pylist():
        side = {row["worst_group_proposal"]: 0, row["best_group_proposal"]: 2}[sex[r["case_id"]]]
        matrix[rank[r["cluster_id"]], side] += 1
        matrix[rank[r["cluster_id"]], side + 1] += int(r["proposed_action"][1:]) == level[r["case_id"]]
    sums = replicate_products(11, 300, matrix)
    ratio = (sums[:, 1] / sums[:, 0]) / (sums[:, 3] / sums[:, 2])
    lower, upper = np.quantile(ratio, [0.025, 0.975])
    assert row["fairness_proposal_ci_lower"] == pytest.approx(lower, rel=1e-12)
    assert row["fairness_proposal_ci_upper"] == pytest.approx(upper, rel=1e-12)


def test_identical_groups_give_a_ratio_of_one_inside_its_interval():
    layout = [2, 1, 3, 2] * 10  # 40 clusters each, the same images, the same answers
    records, images, contexts = _groups({"a": layout, "b": layout})
    rows = records.to_pylist()
    for r in rows:  # a third of the proposals wrong, the same ones in both groups (cluster c, image k)
        c, k = (int(part[1:]) for part in r["case_id"].split("-")[1:])
        if (c + k) % 3 == 0:
            r["proposed_action"] = f"a{(int(r['proposed_action'][1:]) + 1) % 4}"
    row = _fairness(pa.Table.from_pylist(rows), images, contexts, grouping="anatomic_site", reps=500)
    for role in ROLES:
        assert row[f"fairness_{role}"] == 1.0
        assert row[f"fairness_{role}_ci_lower"] < 1.0 < row[f"fairness_{role}_ci_upper"]
        assert (row[f"worst_group_{role}"], row[f"best_group_{role}"]) == ("a", "b")  # two groups, not one twice


def _nearly_never_right():
    """Two sites of 40 one-image clusters: the proposals of site a are never right, those of site b right
    once (1 of 40: the best group's accuracy, whose bootstrap interval reaches 0)."""
    records, images, contexts = _groups({"a": [1] * 40, "b": [1] * 40})
    rows = records.to_pylist()
    level = {r["image_id"]: r["ideal_action_level"] for r in images.to_pylist()}
    for r in rows:
        right = r["case_id"] == "b-c0-i0"
        r["proposed_action"] = f"a{level[r['case_id']] if right else (level[r['case_id']] + 1) % 4}"
    return pa.Table.from_pylist(rows), images, contexts


def test_a_ratio_whose_denominator_interval_includes_zero_is_not_estimable():
    row = _fairness(*_nearly_never_right(), grouping="anatomic_site", reps=400)
    assert row["max_accuracy_proposal"] == pytest.approx(1 / 40) and row["best_group_proposal"] == "b"
    assert row["fairness_proposal"] is None
    assert row["fairness_proposal_ci_lower"] is None and row["fairness_proposal_ci_upper"] is None
    assert row["reason"].startswith(
        "fairness_proposal not estimable: the interval of the best group's (b) accuracy, [0.000,"
    )
    assert row["fairness_selected"] is not None  # the other role is estimable: its number stays
    md = markdown_report(build_report(_report_inputs(row)))
    fairness = md.split("### Fairness\n", 1)[1]
    assert "| not estimable |" in fairness and "fairness_proposal not estimable" in fairness


def test_the_poisson_scheme_draws_its_own_weights():
    row = _fairness(*_study(), reps=300, scheme="poisson")
    assert row["interval_method"] == "bootstrap_poisson" and row["scheme"] == "poisson"
    assert row["fairness_proposal_ci_lower"] <= row["fairness_proposal"] <= row["fairness_proposal_ci_upper"]


def _report_inputs(fairness_row: dict) -> ReportInputs:
    """The report's inputs of a lake whose only table is this fairness row (the report's own SQL)."""
    con = sql.connect()
    con.register("fairness", pa.Table.from_pylist([fairness_row]))
    columns = {"fairness": list(fairness_row)}
    parts = {part: sql.run(con, name).to_pylist() for part, name in report_queries(columns).items()}
    return ReportInputs(summary=pa.table({}), contrasts=None, parts=parts, columns=columns)


def test_the_report_shows_each_ratio_with_its_interval_and_how_it_was_made():
    row = _fairness(*_study(), reps=200)
    fairness = markdown_report(build_report(_report_inputs(row))).split("### Fairness\n", 1)[1]
    lower, upper = row["fairness_proposal_ci_lower"], row["fairness_proposal_ci_upper"]
    shown = f"{row['fairness_proposal']:.3f} [{lower:.3f}, {upper:.3f}]"
    assert f"| {shown} |" in fairness and f"Least fair for the proposal: **{shown}**" in fairness
    assert f"scheme reference, seed {DEFAULT_SEEDS['reference']}, 200 replicates, image_weighted" in fairness
