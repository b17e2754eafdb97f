"""Parity with the published AuthEval numbers (to 1e-12) and with an independent numpy loop."""

from __future__ import annotations

import pytest

from autheval.estimation.estimators import estimate
from autheval.records.read import read_records
from autheval.reference_data import reference_path
from benchmarks.numpy_loop import load_trace, paired_contrast, reference_summary
from tests.conftest import SHARED, published_summary, read_csv_rows, reference_file, run_cli

TOL = 1e-12


def assert_cells_equal(ours: dict, published: dict) -> None:
    assert list(ours) == list(published)
    for column, text in published.items():
        if column == "estimand" or text == "":
            assert ours[column] == text, column
        else:
            assert abs(float(ours[column]) - float(text)) <= TOL, (column, ours[column], text)


@pytest.mark.parametrize("source", ["shared", "embedded"])
def test_mixed_summary_matches_published_in_every_cell(source, tmp_out):
    path = SHARED / "traces/mixed/case_trace.csv" if source == "shared" else reference_path("trace_mixed")
    if not path.exists():
        pytest.skip("../shared is not present on this machine; the embedded copy is tested")
    result = run_cli("evaluate", "--input", str(path), "--output-dir", str(tmp_out))
    assert result.returncode == 0, result.stderr
    ours = read_csv_rows(tmp_out / "authority_summary.csv")
    published = published_summary()
    assert len(ours) == len(published) == 2
    for our_row, published_row in zip(ours, published):
        assert_cells_equal(our_row, published_row)


TRACES = [
    "trace_mixed",
    "trace_capacity_ceiling",
    "trace_safety_floor",
    "trace_medgemma_readout",
    "trace_llava_med_head",
    "trace_clip_probe",
]


@pytest.fixture(scope="module")
def numpy_oracle():
    return {name: load_trace(reference_file(name)) for name in TRACES}


def test_every_trace_matches_an_independent_numpy_loop(numpy_oracle):
    records = [read_records(reference_file(n), analysis=n) for n in TRACES]
    result = estimate(records, scheme="reference", reps=5000)
    for name in TRACES:
        expected = reference_summary(numpy_oracle[name])
        for metric in ("J_auth", "J", "intervention_rate", "delta", "Delta_authority"):
            row = result.estimate(name, "image_weighted", metric)
            assert abs(row["estimate"] - expected[metric]) <= TOL, (name, metric)
            assert abs(row["ci_lower"] - expected[f"{metric}_ci_lower"]) <= TOL, (name, metric)
            assert abs(row["ci_upper"] - expected[f"{metric}_ci_upper"]) <= TOL, (name, metric)
        row = result.estimate(name, "cluster_equal", "Delta_authority")
        assert abs(row["estimate"] - expected["Delta_authority_cluster"]) <= TOL
        assert abs(row["ci_lower"] - expected["Delta_authority_cluster_ci_lower"]) <= TOL
        assert abs(row["ci_upper"] - expected["Delta_authority_cluster_ci_upper"]) <= TOL


def test_paired_contrast_matches_the_numpy_loop(numpy_oracle, tmp_out):
    arms = {
        "LLaVA-Med head": "trace_llava_med_head",
        "MedGemma readout": "trace_medgemma_readout",
        "CLIP probe": "trace_clip_probe",
    }
    args = ["compare", "--output-dir", str(tmp_out), "--contrast", "CLIP probe minus LLaVA-Med head"]
    for name, table in arms.items():
        args += ["--arm", f"{name}={reference_file(table)}"]
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    rows = read_csv_rows(tmp_out / "paired_contrast.csv")
    expected = paired_contrast(numpy_oracle["trace_clip_probe"], numpy_oracle["trace_llava_med_head"])
    assert [r["unit"] for r in rows] == ["image_weighted", "cluster_equal"]
    for row in rows:
        assert row["contrast"] == "CLIP probe minus LLaVA-Med head"
        assert abs(float(row["difference"]) - expected[row["unit"]]) <= TOL
        lo, hi = expected[f"{row['unit']}_ci"]
        assert abs(float(row["ci_lower"]) - lo) <= TOL and abs(float(row["ci_upper"]) - hi) <= TOL
        assert row["excludes_zero"] == str(lo > 0 or hi < 0)
    summary = read_csv_rows(tmp_out / "proposal_dependence_summary.csv")
    assert [r["proposal"] for r in summary] == list(arms)
    for row in summary:
        oracle = reference_summary(numpy_oracle[arms[row["proposal"]]])
        assert int(row["n_images"]) == 3967 and int(row["n_clusters"]) == 2090
        assert abs(float(row["Delta_authority_image"]) - oracle["Delta_authority"]) <= TOL
        assert abs(float(row["Delta_authority_cluster_ci_upper"]) - oracle["Delta_authority_cluster_ci_upper"]) <= TOL


def test_medgemma_arm_equals_the_capacity_trace():
    """Spec 3.8: the proposal-dependence MedGemma arm is the capacity-ceiling trace."""
    a = read_records(reference_file("trace_medgemma_readout"), analysis="a")
    b = read_records(reference_file("trace_capacity_ceiling"), analysis="b")
    result = estimate([a, b], reps=200)
    for unit in ("image_weighted", "cluster_equal"):
        for metric in ("J", "J_auth", "Delta_authority", "delta", "intervention_rate"):
            x, y = result.estimate("a", unit, metric), result.estimate("b", unit, metric)
            assert (x["estimate"], x["ci_lower"], x["ci_upper"]) == (y["estimate"], y["ci_lower"], y["ci_upper"])


def test_every_released_interval_uses_one_shared_stream():
    """Spec 6.4: J_auth and its interval are identical across the three regimes."""
    names = ["trace_mixed", "trace_capacity_ceiling", "trace_safety_floor"]
    result = estimate([read_records(reference_file(n), analysis=n) for n in names], reps=5000)
    rows = [result.estimate(n, "image_weighted", "J_auth") for n in names]
    assert len({(r["estimate"], r["ci_lower"], r["ci_upper"]) for r in rows}) == 1
    for n in names:
        check = result.check(n, "image_weighted")
        assert check["point_residual"] <= TOL and check["max_replicate_residual"] <= TOL


def test_same_inputs_give_the_same_bytes(tmp_path):
    outputs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        assert (
            run_cli(
                "evaluate", "--input", str(reference_file("trace_safety_floor")), "--output-dir", str(out)
            ).returncode
            == 0
        )
        outputs.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert outputs[0] == outputs[1]
    assert set(outputs[0]) == {"summary.json", "summary.md", "authority_summary.csv", "estimates.csv", "receipt.json"}
