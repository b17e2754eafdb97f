"""The command line contract."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, read_csv_rows, reference_file, run_cli


def test_evaluate_imports_neither_dagster_nor_torch(tmp_path):
    code = (
        "import sys; from autheval.cli import main; "
        f"main(['evaluate', '--input', {str(reference_file('authority_log_example'))!r}, '--output-dir', {str(tmp_path)!r}, '--reps', '20']); "
        "print(sorted(m for m in ('dagster', 'torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_scheme_reps_seed_are_declared(tmp_out):
    args = ["evaluate", "--input", str(reference_file("trace_mixed")), "--output-dir", str(tmp_out),
            "--scheme", "poisson", "--reps", "300", "--seed", "7"]  # fmt: skip
    assert run_cli(*args).returncode == 0
    summary = json.loads((tmp_out / "summary.json").read_text())
    assert (summary["scheme"], summary["bootstrap_reps"], summary["seed"]) == ("poisson", 300, 7)
    rows = read_csv_rows(tmp_out / "estimates.csv")
    assert len(rows) == 16
    assert {(r["scheme"], r["reps"], r["seed"]) for r in rows} == {("poisson", "300", "7")}
    assert {r["unit"] for r in rows} == {"image_weighted", "cluster_equal"}
    assert all(len(r["data_sha256"]) == 64 for r in rows)


def test_compare_default_contrast_is_each_arm_minus_the_first(tmp_out):
    args = ["compare", "--output-dir", str(tmp_out), "--reps", "200",
            "--arm", f"low={reference_file('trace_llava_med_head')}",
            "--arm", f"high={reference_file('trace_clip_probe')}"]  # fmt: skip
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    rows = read_csv_rows(tmp_out / "paired_contrast.csv")
    assert [(r["contrast"], r["unit"]) for r in rows] == [("high minus low", "image_weighted"), ("high minus low", "cluster_equal")]


def test_compare_rejects_arms_on_different_clusters(tmp_path):
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    header = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local\n"
    a.write_text(header + "c1,k1,a0,a1,-1,-2\nc2,k2,a0,a0,0,0\n")
    b.write_text(header + "c1,k1,a0,a1,-1,-2\nc2,k3,a0,a0,0,0\n")
    result = run_cli("compare", "--arm", f"A={a}", "--arm", f"B={b}", "--output-dir", str(tmp_path / "o"))
    assert result.returncode == 2 and "identical clusters" in result.stderr


def test_bad_arm_and_contrast_syntax(tmp_path):
    assert run_cli("compare", "--arm", "nopath").returncode == 2
    log = reference_file("authority_log_example")
    result = run_cli("compare", "--arm", f"A={log}", "--arm", f"B={log}", "--contrast", "A versus B")
    assert result.returncode == 2 and "A minus B" in result.stderr
