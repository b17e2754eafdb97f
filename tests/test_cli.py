"""The command line contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, read_csv_rows, reference_file, run_cli
from warehouse.lake import Lake


def test_evaluate_imports_neither_dagster_nor_torch(tmp_path):
    code = (
        "import sys; from autheval.cli.main import main; "
        f"main(['evaluate', '--input', {str(reference_file('authority_log_example'))!r}, "
        f"'--output-dir', {str(tmp_path)!r}, '--reps', '20']); "
        "print(sorted(m for m in ('dagster', 'torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_scheme_reps_seed_are_declared(tmp_out):
    args = [
        "evaluate",
        "--input",
        str(reference_file("trace_mixed")),
        "--output-dir",
        str(tmp_out),
        "--scheme",
        "poisson",
        "--reps",
        "300",
        "--seed",
        "7",
    ]
    assert run_cli(*args).returncode == 0
    summary = json.loads((tmp_out / "summary.json").read_text())
    assert (summary["scheme"], summary["bootstrap_reps"], summary["seed"]) == ("poisson", 300, 7)
    rows = read_csv_rows(tmp_out / "estimates.csv")
    assert len(rows) == 16
    assert {(r["scheme"], r["interval_method"], r["reps"], r["seed"]) for r in rows} == {
        ("poisson", "bootstrap_poisson", "300", "7")
    }
    assert {r["unit"] for r in rows} == {"image_weighted", "cluster_equal"}
    assert all(len(r["data_sha256"]) == 64 for r in rows)


def test_compare_default_contrast_is_each_arm_minus_the_first(tmp_out):
    args = [
        "compare",
        "--output-dir",
        str(tmp_out),
        "--reps",
        "200",
        "--arm",
        f"low={reference_file('trace_llava_med_head')}",
        "--arm",
        f"high={reference_file('trace_clip_probe')}",
    ]
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    rows = read_csv_rows(tmp_out / "paired_contrast.csv")
    assert [(r["contrast"], r["unit"]) for r in rows] == [
        ("high minus low", "image_weighted"),
        ("high minus low", "cluster_equal"),
    ]


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


# --- CLI conventions (issue 7, item 13) --------------------------------------------------------------


def _one_line_error(result, *words):
    """Exit 2 with exactly one error line on stderr (no traceback) that contains every word (warnings
    about the data, such as few clusters, may come before it: one line each)."""
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("autheval: warning: ")]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_version():
    from autheval import __version__

    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"autheval {__version__}"


def test_help_is_written_for_users():
    top = run_cli("--help")
    assert top.returncode == 0
    assert "Dagster, torch" not in top.stdout and "imported only" not in top.stdout  # no notes for developers
    assert "Delta = J_auth - J" in top.stdout and "--version" in top.stdout and "stderr" in top.stdout
    for command in ("evaluate", "compare", "demo", "synth"):
        text = run_cli(command, "--help").stdout
        description = text.split("\n\n")[1]  # usage, then a paragraph that says what the command does
        assert not description.lstrip().startswith(("options:", "-h")), f"{command} --help has no description"
    assert "0 to 4611686018427387903" in run_cli("evaluate", "--help").stdout  # the seed range is documented


@pytest.mark.slow
def test_demo_reps_reach_the_estimates_and_progress_goes_to_stderr(tmp_path):
    result = run_cli("demo", "--lake", str(tmp_path / "lake"), "--reps", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    reps = Lake(tmp_path / "lake").read("estimates").column("reps").to_pylist()  # through the lake's snapshot
    assert set(reps) == {10}
    tally = re.search(r"asset checks: (\d+) of (\d+) passed", result.stdout)
    assert tally and tally.group(1) == tally.group(2) and "Paired contrast" in result.stdout
    assert "Materializing" not in result.stdout and "[1/8]" not in result.stdout
    assert "Materializing" in result.stderr and "[7/8] reports" in result.stderr and "[8/8] recurring" in result.stderr


def test_synth_shows_a_progress_bar_on_stderr(tmp_path):
    env = {**os.environ, "TTY_COMPATIBLE": "1"}  # rich draws its bar only on a terminal
    result = subprocess.run(
        [sys.executable, "-m", "autheval", "synth", "--n", "12", "--out", str(tmp_path / "c"), "--size", "64", "48"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "writing images" in result.stderr and "12/12" in result.stderr
    assert result.stdout.startswith("wrote 12 images") and "writing images" not in result.stdout


# --- errors a user can act on (issue 7, item 8) -----------------------------------------------------


def _evaluate(*args, out):
    return run_cli(
        "evaluate",
        "--input",
        str(reference_file("authority_log_example")),
        "--reps",
        "1000",
        "--output-dir",
        str(out),
        *args,
    )


def test_output_dir_that_is_a_file_or_under_a_file(tmp_path):
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a folder\n")
    _one_line_error(_evaluate(out=blocker), "--output-dir", str(blocker), "is a file")
    _one_line_error(_evaluate(out=blocker / "sub"), "--output-dir", "lies under", str(blocker))
    assert blocker.read_text() == "not a folder\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_output_dir_not_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        _one_line_error(_evaluate(out=locked / "out"), "--output-dir", "not writable")
    finally:
        locked.chmod(0o700)


def test_output_files_are_replaced_all_or_none(tmp_path):
    out = tmp_path / "out"
    (out / "estimates.csv").mkdir(parents=True)  # the last file cannot be written
    _one_line_error(_evaluate(out=out), "--output-dir", "estimates.csv")
    assert sorted(p.name for p in out.iterdir()) == ["estimates.csv"]  # no partial set, no temporary left


def test_a_write_that_fails_midway_leaves_no_partial_set(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from autheval.cli.main import main

    out = tmp_path / "out"
    real_write, written = Path.write_bytes, []

    def write_bytes(self, data):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(self)
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    code = main(
        [
            "evaluate",
            "--input",
            str(reference_file("authority_log_example")),
            "--reps",
            "1000",
            "--output-dir",
            str(out),
        ]
    )
    assert code == 2 and "No space left on device" in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []


def test_one_seed_range_for_every_scheme(tmp_path):
    for scheme, seed in (
        ("poisson", 2**64),
        ("poisson", 2**62),
        ("poisson", -1),
        ("reference", 2**64),
        ("evaluator", 2**64),
    ):
        _one_line_error(_evaluate("--scheme", scheme, "--seed", str(seed), out=tmp_path / "o"), "--seed", "2^62")
    assert not (tmp_path / "o").exists()
    assert _evaluate("--scheme", "poisson", "--seed", str(2**62 - 1), out=tmp_path / "o").returncode == 0


def test_demo_lake_that_is_a_file(tmp_path):
    blocker = tmp_path / "lake.txt"
    blocker.write_text("x")
    _one_line_error(run_cli("demo", "--lake", str(blocker)), "--lake", "is a file")
    _one_line_error(run_cli("demo", "--lake", str(blocker / "lake")), "--lake", "lies under")


def test_demo_checks_its_input_before_materializing(tmp_path):
    missing = tmp_path / "no-such-cohort"
    lake = tmp_path / "lake"
    _one_line_error(
        run_cli("demo", "--source", "isic2019", "--input", str(missing), "--lake", str(lake)),
        "--input",
        str(missing),
        "no such folder",
    )
    _one_line_error(run_cli("demo", "--source", "isic2019", "--lake", str(lake)), "--input")
    _one_line_error(
        run_cli(
            "demo",
            "--source",
            "isic2019",
            "--input",
            str(tmp_path),
            "--freeze",
            str(tmp_path / "freeze.csv"),
            "--lake",
            str(lake),
        ),
        "--freeze",
        "no such file",
    )
    _one_line_error(run_cli("demo", "--reps", "0", "--lake", str(lake)), "--reps")
    assert not lake.exists()  # nothing was materialized


def test_warnings_are_one_plain_line_each_on_stderr(tmp_path):
    log = tmp_path / "one.csv"
    log.write_text(
        "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local\n"
        "a,c1,a1,a2,-1,-2\nb,c2,a1,a1,0,0\n"
    )
    result = run_cli("compare", "--arm", f"A={log}", "--reps", "100", "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert (
        "autheval: warning: compare was given one arm (A): no paired contrast was asked; "
        "give a second --arm (or use evaluate)" in lines
    )
    assert all(line.startswith("autheval: warning: ") for line in lines), lines
    assert "AuthEvalWarning" not in result.stderr


def test_the_same_input_gives_the_same_result_bytes_in_any_folder(tmp_path):
    """Results name an input by its file name (the receipt keeps where it lay): evaluate and compare of
    one log copied into two folders, given as an absolute path, write identical result files."""
    import shutil

    log = reference_file("authority_log_example")
    results = {}
    for where in ("a", tmp_path / "b" / "deeper"):
        folder = tmp_path / where
        folder.mkdir(parents=True)
        shutil.copy(log, folder / f"log{log.suffix}")
        given = str(folder / f"log{log.suffix}")
        for command, flags in (
            ("evaluate", ["--input", given]),
            ("compare", ["--arm", f"a={given}", "--arm", f"b={given}", "--unpaired"]),
        ):
            out = folder / command
            result = run_cli(command, *flags, "--reps", "50", "--no-progress", "--output-dir", str(out))
            assert result.returncode == 0, result.stderr
            results.setdefault(command, []).append(
                {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "receipt.json"}
            )
    for command, (first, second) in results.items():
        assert first == second, command
    assert f",log{log.suffix},".encode() in results["evaluate"][0]["estimates.csv"]
    assert str(tmp_path).encode() not in results["evaluate"][0]["estimates.csv"]
