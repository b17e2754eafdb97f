"""What each record level supports, and the generic evaluator's published example (spec 6.7-6.8)."""

from __future__ import annotations

import json

import pytest

from autheval.estimation.estimators import estimate
from autheval.records.read import read_records
from autheval.records.schema import FULL, PROPOSAL_ONLY, ROLE_SEPARATED
from tests.conftest import reference_file, run_cli

# Spec 6.7: the 4-row example log with the evaluator defaults.
EXAMPLE = {
    "J": (-0.75, -1.5, 0.0, 4),
    "intervention_rate": (0.5, 0.0, 1.0, 4),
    "J_auth": (-0.5, -1.5, 0.0, 4),
    "Delta_authority": (0.25, -0.75, 1.5, 4),
    "delta": (0.5, -1.0, 2.0, 2),
    "J_std": (-0.5, -1.0, 0.0, 4),
    "Delta_total": (0.25, 0.0, 0.75, 4),
    "Delta_utility": (0.0, -0.75, 0.75, 4),
}


def test_example_log_reproduces_the_generic_evaluator(tmp_out):
    result = run_cli("evaluate", "--input", str(reference_file("authority_log_example")), "--output-dir", str(tmp_out))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_out / "summary.json").read_text())
    assert summary["mode"] == "full" and summary["n"] == 4 and summary["n_clusters"] == 4
    assert summary["seed"] == 20260710 and summary["bootstrap_reps"] == 5000 and summary["scheme"] == "evaluator"
    assert summary["quantiles"] == [0.025, 0.975]
    for metric, (est, lo, hi, n) in EXAMPLE.items():
        m = summary["metrics"][metric]
        assert m["available"] is True and m["n"] == n
        for got, want in ((m["estimate"], est), (m["ci_lower"], lo), (m["ci_upper"], hi)):
            assert abs(got - want) <= 1e-12, (metric, got, want)
    assert summary["metric_seeds"]["Delta_utility"] == 20260717


def log(tmp_path, rows, header="case_id,cluster_id,proposed_action,executed_action,utility_executed_local"):
    path = tmp_path / "log.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_role_separated_with_changes_marks_the_gap_not_recoverable(tmp_path):
    records = read_records(log(tmp_path, ["c1,k1,a0,a0,0.0", "c2,k2,a2,a1,-1.0", "c3,k2,a1,a1,0.0"]))
    assert records.level == ROLE_SEPARATED and records.mode == "observable_only"
    result = estimate([records], scheme="evaluator", reps=200)
    for metric in ("J_auth", "Delta_authority", "delta"):
        row = result.estimate(records.analysis, "image_weighted", metric)
        assert row["available"] is False and row["estimate"] is None and row["ci_lower"] is None
        assert row["status"] == "not_recoverable" and row["reason"] == "utility_proposed_local not supplied"
    p = result.estimate(records.analysis, "image_weighted", "intervention_rate")
    assert p["available"] and p["estimate"] == pytest.approx(1 / 3)


def test_no_change_gives_zero_gap_and_undefined_delta(tmp_path):
    records = read_records(log(tmp_path, ["c1,k1,a0,a0,0.0", "c2,k2,a1,a1,-1.0"]))
    result = estimate([records], scheme="reference", reps=100)
    gap = result.estimate(records.analysis, "image_weighted", "Delta_authority")
    assert gap["available"] and (gap["estimate"], gap["ci_lower"], gap["ci_upper"]) == (0.0, 0.0, 0.0)
    delta = result.estimate(records.analysis, "image_weighted", "delta")
    assert delta["available"] is False and delta["reason"] == "utility_proposed_local not supplied"


def test_full_record_with_no_change_says_no_interventions(tmp_path):
    rows = ["c1,k1,a0,a0,0.0,0.0", "c2,k2,a1,a1,-1.0,-1.0"]
    records = read_records(
        log(
            tmp_path,
            rows,
            "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local",
        )
    )
    assert records.level == FULL
    result = estimate([records], scheme="evaluator", reps=100)
    delta = result.estimate(records.analysis, "image_weighted", "delta")
    assert delta["status"] == "undefined" and delta["reason"] == "no interventions observed"


def test_local_score_on_changed_rows_only_is_full(tmp_path):
    header = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"
    records = read_records(log(tmp_path, ["c1,k1,a0,a0,-0.5,", "c2,k2,a2,a1,-1.0,-3.0"], header))
    assert records.level == FULL
    result = estimate([records], scheme="reference", reps=50)
    assert result.estimate(records.analysis, "image_weighted", "J_auth")["estimate"] == pytest.approx(-1.75)
    assert result.estimate(records.analysis, "image_weighted", "Delta_authority")["estimate"] == pytest.approx(-1.0)


def test_global_terms_and_observable_plus_global(tmp_path):
    header = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_global"
    records = read_records(log(tmp_path, ["c1,k1,a0,a1,-1.0,-2.0", "c2,k2,a1,a1,0.0,0.0"], header))
    assert records.mode == "observable_plus_global"
    result = estimate([records], scheme="evaluator", reps=100)
    assert result.estimate(records.analysis, "image_weighted", "J_std")["estimate"] == pytest.approx(-1.0)
    assert result.estimate(records.analysis, "image_weighted", "Delta_total")["estimate"] == pytest.approx(-0.5)
    assert result.estimate(records.analysis, "image_weighted", "Delta_utility")["status"] == "not_recoverable"


def test_proposal_only_recovers_nothing_about_authority(tmp_path):
    header = "case_id,proposed_action,utility_proposed_global"
    records = read_records(log(tmp_path, ["c1,a0,-1.0", "c2,a3,0.0"], header))
    assert records.level == PROPOSAL_ONLY and records.mode == "proposal_only"
    result = estimate([records], scheme="evaluator", reps=100)
    for metric in ("J", "intervention_rate", "Delta_authority", "delta", "Delta_total"):
        assert result.estimate(records.analysis, "image_weighted", metric)["status"] == "not_recoverable"
    assert result.estimate(records.analysis, "image_weighted", "J_std")["estimate"] == pytest.approx(-0.5)


def test_proposal_only_log_gets_no_local_score(tmp_path):
    """Scores of the proposal alone do not make J_auth, Delta_utility (or anything about authority) a
    number when nothing was selected: the record is proposal-only whatever scores it carries."""
    header = "case_id,proposed_action,utility_proposed_local,utility_proposed_global"
    records = read_records(log(tmp_path, ["c1,a0,-1.0,-2.0", "c2,a3,0.0,-1.0"], header))
    assert records.level == PROPOSAL_ONLY and not records.has_local and records.mode == "proposal_only"
    result = estimate([records], scheme="evaluator", reps=100)
    for unit in ("image_weighted", "cluster_equal"):
        for metric in ("J", "intervention_rate", "J_auth", "Delta_authority", "delta", "Delta_total", "Delta_utility"):
            row = result.estimate(records.analysis, unit, metric)
            assert row["available"] is False and row["estimate"] is None and row["status"] == "not_recoverable", metric
        assert result.estimate(records.analysis, unit, "J_std")["estimate"] == pytest.approx(-1.5)


def test_local_score_on_unchanged_rows_only_is_not_full(tmp_path):
    """A proposal score on some rows is not a full record: the changed rows (the ones that carry the
    gap) have none, so J_auth, Delta and delta are not recoverable."""
    header = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"
    rows = ["c1,k1,a0,a0,-0.5,-0.5", "c2,k2,a2,a1,-1.0,", "c3,k3,a1,a1,0.0,"]
    records = read_records(log(tmp_path, rows, header))
    assert records.level == ROLE_SEPARATED and not records.has_local and records.mode == "observable_only"
    result = estimate([records], scheme="reference", reps=100)
    for metric in ("J_auth", "Delta_authority", "delta", "Delta_utility"):
        row = result.estimate(records.analysis, "image_weighted", metric)
        assert row["available"] is False and row["estimate"] is None, metric
        if metric != "Delta_utility":  # (that one lacks utility_proposed_global first)
            # supplied, on the wrong rows: said so, not "not supplied"
            assert row["reason"] == (
                f"utility_proposed_local is given only on rows where the action was not changed, "
                f"so {metric} is not recoverable"
            ), row["reason"]


def test_proposal_only_with_local_scores_blames_the_missing_selection(tmp_path):
    header = "case_id,proposed_action,utility_proposed_local"
    records = read_records(log(tmp_path, ["c1,a0,-1.0", "c2,a3,0.0"], header))
    result = estimate([records], scheme="evaluator", reps=50)
    for metric in ("J_auth", "delta"):
        assert (
            result.estimate(records.analysis, "image_weighted", metric)["reason"]
            == "executed_action not supplied (proposal-only record)"
        )


def test_proposal_only_summary_does_not_count_changed_cases(tmp_path, tmp_out):
    """A proposal-only record has no executed action: the number of changed cases is unknown, not 0."""
    path = log(tmp_path, ["c1,a0,-1.0", "c2,a3,0.0"], "case_id,proposed_action,utility_proposed_global")
    result = run_cli("evaluate", "--input", str(path), "--output-dir", str(tmp_out), "--reps", "50")
    assert result.returncode == 0, result.stderr
    text = (tmp_out / "summary.md").read_text()
    assert "changed: not recoverable (proposal-only record: no executed action)" in text
    assert "changed: 0" not in text
    role_separated = log(tmp_path, ["c1,k1,a0,a0,0.0", "c2,k2,a2,a1,-1.0"])
    assert (
        run_cli(
            "evaluate", "--input", str(role_separated), "--output-dir", str(tmp_out / "rs"), "--reps", "50"
        ).returncode
        == 0
    )
    assert "; changed: 1\n" in (tmp_out / "rs" / "summary.md").read_text()


def test_trace_with_global_scores_reports_the_utility_terms(tmp_out):
    result = run_cli(
        "evaluate", "--input", str(reference_file("trace_clip_probe")), "--output-dir", str(tmp_out), "--reps", "200"
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_out / "summary.json").read_text())
    m = summary["metrics"]
    assert summary["scheme"] == "reference" and summary["record_level"] == FULL
    assert (
        abs(m["Delta_total"]["estimate"] - (m["Delta_utility"]["estimate"] + m["Delta_authority"]["estimate"])) <= 1e-12
    )
    assert abs(m["J_std"]["estimate"] - m["J_auth"]["estimate"] - m["Delta_utility"]["estimate"]) <= 1e-12
    assert summary["checks"]["image_weighted"]["identity_residual"] <= 1e-12
