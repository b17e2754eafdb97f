"""The command line against hostile flags and a hostile machine (issue 15): an output never replaces an
input, every refused flag is one line naming it with nothing written, and a full disk, a read-only
folder or Ctrl-C end in one line, not a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, exec_after, reference_file, run_cli

LOG = reference_file("authority_log_example")


def one_line_error(result, *words, code=2):
    """Exit `code` with exactly one line on stderr (no traceback) that contains every word."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr
    assert all(w in lines[0] for w in words), lines[0]


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


@contextlib.contextmanager
def mounted_tmpfs(where: Path, options: str):
    """A small tmpfs at `where` (root only); skips the test when it cannot be mounted."""
    where.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip() or 'mount failed'}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def log_copy(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(LOG.read_bytes() if LOG.suffix == ".csv" else _as_csv(LOG))  # shared CSV or embedded Parquet
    return path


def _as_csv(parquet: Path) -> bytes:
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pacsv.write_csv(pq.read_table(parquet), buffer)
    return buffer.getvalue()


# --- item 3: an output is never an input --------------------------------------------------------------


def test_evaluate_refuses_an_output_dir_holding_its_input(tmp_path):
    log = log_copy(tmp_path / "d", "estimates.csv")
    before = listing(tmp_path / "d")
    one_line_error(
        run_cli("evaluate", "--input", str(log), "--output-dir", str(tmp_path / "d"), "--reps", "100"),
        "--output-dir",
        "estimates.csv",
        "would replace the input",
    )
    assert listing(tmp_path / "d") == before


def test_evaluate_refuses_an_output_that_is_its_input_through_a_link(tmp_path):
    real = log_copy(tmp_path / "data", "log.csv")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(out / "summary.md", tmp_path / "data" / "via-link.csv")  # the input is a link to an output
    (out / "summary.md").write_bytes(real.read_bytes())
    one_line_error(
        run_cli(
            "evaluate", "--input", str(tmp_path / "data" / "via-link.csv"), "--output-dir", str(out), "--reps", "100"
        ),
        "--output-dir",
        "summary.md",
    )
    os.link(real, out / "authority_summary.csv")  # an output name that is a hard link of the input
    (tmp_path / "data" / "via-link.csv").unlink()
    one_line_error(
        run_cli("evaluate", "--input", str(real), "--output-dir", str(out), "--reps", "100"),
        "--output-dir",
        "authority_summary.csv",
        "--input",
    )
    assert sorted(p.name for p in out.iterdir()) == ["authority_summary.csv", "summary.md"]
    assert (out / "authority_summary.csv").read_bytes() == real.read_bytes()


def test_compare_refuses_an_output_dir_holding_an_arm(tmp_path):
    a = log_copy(tmp_path, "paired_contrast.csv")
    b = log_copy(tmp_path / "b", "b.csv")
    before = listing(tmp_path)
    one_line_error(
        run_cli("compare", "--arm", f"A={a}", "--arm", f"B={b}", "--output-dir", str(tmp_path), "--reps", "100"),
        "--output-dir",
        "paired_contrast.csv",
        "--arm A",
    )
    assert listing(tmp_path) == before


@pytest.mark.parametrize("unpaired", [False, True])
@pytest.mark.parametrize(
    "flags, words",
    [
        (["--contrast", "B minus A", "--contrast", "B minus A"], ["--contrast", "is given twice", "B minus A"]),
        (["--contrast", "A minus A"], ["--contrast", "compares an arm with itself", "A minus A"]),
        (["--contrast", "C minus A"], ["--contrast", "unknown arm 'C'"]),
    ],
)
def test_compare_refuses_a_contrast_twice_of_an_arm_with_itself_or_of_no_arm(tmp_path, flags, words, unpaired):
    """Checked before a record is read: each refusal one line naming --contrast, nothing written."""
    out = tmp_path / "out"
    arms = ["--arm", f"A={LOG}", "--arm", f"B={LOG}"]
    result = run_cli("compare", *arms, *flags, *(["--unpaired"] if unpaired else []), "--output-dir", str(out))
    one_line_error(result, *words)
    assert not out.exists()


@pytest.mark.parametrize("unpaired", [False, True])
def test_compare_refuses_two_arms_of_one_name(tmp_path, unpaired):
    out = tmp_path / "out"
    arms = ["--arm", f"A={LOG}", "--arm", f"A={LOG}"]
    result = run_cli("compare", *arms, *(["--unpaired"] if unpaired else []), "--output-dir", str(out))
    one_line_error(result, "--arm", "the arm name 'A' is given twice")
    assert not out.exists()


def test_aggregate_refuses_an_output_that_is_its_input(tmp_path):
    probs = tmp_path / "probs.csv"
    probs.write_text("case_id,variant,option,prob\nc1,0,a0,0.1\nc1,0,a1,0.2\nc1,0,a2,0.3\nc1,0,a3,0.4\n")
    before = probs.read_bytes()
    one_line_error(
        run_cli("aggregate", "--input", str(probs), "--method", "single", "--output", str(probs)),
        "--output",
        "would replace the input",
    )
    os.symlink(probs, tmp_path / "out.csv")
    one_line_error(
        run_cli("aggregate", "--input", str(probs), "--method", "single", "--output", str(tmp_path / "out.csv")),
        "--output",
        "out.csv",
    )
    assert probs.read_bytes() == before
    assert (
        run_cli(
            "aggregate", "--input", str(probs), "--method", "single", "--output", str(tmp_path / "slates.csv")
        ).returncode
        == 0
    )


def test_demo_refuses_an_input_inside_its_lake(tmp_path):
    lake = tmp_path / "lake"
    proposals = lake / "synthetic_cohort" / "proposals.csv"
    proposals.parent.mkdir(parents=True)
    proposals.write_text("mechanism,image_id,a_head\nm,ISIC_0000000,a1\n")
    before = listing(lake)
    one_line_error(
        run_cli("demo", "--source", "synthetic", "--proposals", str(proposals), "--lake", str(lake)),
        "--lake",
        "--proposals",
        "outside the lake",
    )
    assert listing(lake) == before


# --- item 11: every refused flag is one line naming it, and nothing is written ------------------------


def test_demo_refuses_too_many_replicates_before_writing(tmp_path):
    one_line_error(run_cli("demo", "--reps", "999999999999", "--lake", str(tmp_path / "lake")), "--reps", "1,000,000")
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("demo", "--lake", ""),
        ("evaluate", "--input", str(LOG), "--output-dir", ""),
        ("synth", "--n", "10", "--out", ""),
        ("ui", "--lake", ""),
    ],
    ids=["demo-lake", "evaluate-output-dir", "synth-out", "ui-lake"],
)
def test_an_empty_path_flag_is_refused(tmp_path, args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's code, started in an empty folder
    result = subprocess.run(
        [sys.executable, "-m", "autheval", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    one_line_error(result, f"argument {args[-2]}", "must not be empty")
    assert list(tmp_path.iterdir()) == []  # nothing written where the command was started


@pytest.mark.parametrize(
    "args,flag",
    [
        (("--n", "10", "--size", "0", "0"), "--size"),
        (("--n", "10", "--size", "40000", "40000"), "--size"),
        (("--n", "10", "--seed", "-1"), "--seed"),
        (("--n", "0"), "--n"),
        (("--n", "10000000"), "--n"),
    ],
    ids=["size-0", "size-40000", "seed-negative", "n-0", "n-ten-million"],
)
def test_synth_refuses_a_bad_flag_before_writing(tmp_path, args, flag):
    out = tmp_path / "cohort"
    one_line_error(run_cli("synth", *args, "--out", str(out)), flag)
    assert not out.exists()


def test_synth_says_what_a_cohort_costs_and_asks_for_yes_above_the_limit(tmp_path, monkeypatch):
    from autheval.cli import synth as synth_cli
    from autheval.errors import RecordError

    ten_million = run_cli("synth", "--n", "10000000", "--out", str(tmp_path / "c"))
    assert "about 1.4 TB on disk" in ten_million.stderr and "days to write" in ten_million.stderr
    monkeypatch.setattr(synth_cli.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**15))  # a big disk
    with pytest.raises(RecordError, match=r"--n: 100,000 images of 1024 x 768: about 13\.5 GB .*add --yes"):
        synth_cli.check_cohort_size(100_000, tmp_path / "c")
    assert "13.5 GB" in synth_cli.check_cohort_size(100_000, tmp_path / "c", confirm=True)
    with pytest.raises(RecordError, match=r"--n: .* give demo `--input DIR`"):
        synth_cli.check_cohort_size(100_000, tmp_path / "c", confirm=None)  # demo has no --yes
    monkeypatch.setattr(synth_cli.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**6))  # a full one
    with pytest.raises(RecordError, match=r"--n: 1,000 images .* and .* has 1\.0 MB free"):
        synth_cli.check_cohort_size(1000, tmp_path / "c", confirm=True)  # --yes does not make room
    small = run_cli("synth", "--n", "12", "--out", str(tmp_path / "small"), "--size", "64", "48")
    assert small.returncode == 0 and "autheval: 12 images of 64 x 48: about" in small.stderr


def test_demo_refuses_a_synthetic_cohort_above_the_limit(tmp_path):
    one_line_error(run_cli("demo", "--source", "synthetic", "--n", "10000000", "--lake", str(tmp_path / "lake")), "--n")
    assert not (tmp_path / "lake").exists()


def test_ui_refuses_a_port_in_use_in_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ui = subprocess.run(
            [sys.executable, "-m", "autheval", "ui", "--port", str(port), "--lake", str(tmp_path / "lake")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )  # a server that started fails here
        one_line_error(ui, "--port", str(port), "not free")
    one_line_error(run_cli("ui", "--port", "70000", "--lake", str(tmp_path / "lake")), "--port", "65535")
    assert not (tmp_path / "lake").exists()


def test_argparse_refusals_are_one_line_too():
    one_line_error(
        run_cli("evaluate", "--input", str(LOG), "--reps", "many"), "--reps", "invalid int", "autheval evaluate --help"
    )
    one_line_error(run_cli("synth", "--n", "10", "--out", "x", "--bogus"), "--bogus")


# --- item 12: the machine says no, or the user presses Ctrl-C: one line, never a traceback ------------


@pytest.mark.slow
def test_demo_on_a_full_disk_ends_in_one_line(tmp_path):
    with mounted_tmpfs(tmp_path / "small", "size=512k") as small:
        result = run_cli("demo", "--reps", "10", "--lake", str(small / "lake"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("autheval: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0]
    assert result.stderr.strip().splitlines()[-1] == errors[0]


def test_synth_onto_a_read_only_folder_is_one_line(tmp_path):
    with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        one_line_error(
            run_cli("synth", "--n", "10", "--size", "64", "48", "--out", str(ro / "cohort")), "--out", "not writable"
        )


@pytest.mark.parametrize("command", ["synth", "aggregate", "demo"])
def test_an_os_error_in_any_command_is_one_line(tmp_path, monkeypatch, capsys, command):
    import autheval.cli.main as cli

    def refuse(args):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "x.parquet"))

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda word=None: _with_func(parser(word), command, refuse))
    args = {
        "synth": ["synth", "--n", "1", "--out", str(tmp_path)],
        "aggregate": ["aggregate", "--input", "a.csv", "--method", "single", "--output", "b.csv"],
        "demo": ["demo", "--lake", str(tmp_path)],
    }[command]
    assert cli.main(args) == 1
    assert capsys.readouterr().err == f"autheval: error: {tmp_path / 'x.parquet'}: Read-only file system\n"


def _with_func(parser, command, func):
    parser._subparsers._group_actions[0].choices[command].set_defaults(func=func)
    return parser


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), "duckdb"], ids=["KeyboardInterrupt", "duckdb-interrupted"])
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys, tmp_path, raised):
    import autheval.cli.main as cli
    import autheval.estimation.estimators as estimators

    def interrupted(*args, **kwargs):
        if raised == "duckdb":  # what DuckDB raises when Ctrl-C lands in a query
            raise RuntimeError("Query interrupted") from KeyboardInterrupt()
        raise raised

    monkeypatch.setattr(estimators, "estimate", interrupted)
    assert cli.main(["evaluate", "--input", str(LOG), "--output-dir", str(tmp_path / "o"), "--reps", "100"]) == 130
    assert capsys.readouterr().err == "autheval: interrupted\n"
    assert not (tmp_path / "o").exists()


def test_a_real_bug_keeps_its_traceback(monkeypatch, tmp_path):
    import autheval.cli.main as cli
    import autheval.estimation.estimators as estimators

    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(estimators, "estimate", broken)
    with pytest.raises(TypeError, match="a bug"):
        cli.main(["evaluate", "--input", str(LOG), "--output-dir", str(tmp_path / "o"), "--reps", "100"])


def test_ctrl_c_during_evaluate_is_one_line_and_exit_130(tmp_path):
    import random

    rng = random.Random(1)
    log = tmp_path / "big.csv"
    rows = ["case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"]
    for i in range(50_000):
        a = rng.randrange(4)
        b = a if rng.random() < 0.7 else rng.randrange(4)
        rows.append(
            f"c{i},k{i // 3},a{a},a{b},{-abs(a - b) * 0.5},{-abs(a - 2) * 1.0 if a != b else -abs(a - b) * 0.5}"
        )
    log.write_text("\n".join(rows) + "\n")
    process = subprocess.Popen(
        [
            # SIGINT as a terminal gives it (an in-process Dagster run may ignore it)
            *exec_after("signal.signal(signal.SIGINT, signal.SIG_DFL)"),
            "-m",
            "autheval",
            "evaluate",
            "--input",
            str(log),
            "--reps",
            "200000",
            "--output-dir",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in process.stderr:  # Ctrl-C once the bootstrap runs (about a minute's work is left)
            lines.append(line.rstrip("\n"))
            if line.startswith("autheval: bootstrap:"):
                process.send_signal(signal.SIGINT)
                break
        process.wait(timeout=15)  # promptly: the bootstrap's threads stop after their block (else 30 s here)
        rest = process.stderr.read()
    finally:
        process.kill()
    lines += rest.splitlines()
    assert process.returncode == 130, "\n".join(lines)
    assert lines[-1] == "autheval: interrupted" and "Traceback" not in rest
    assert not (tmp_path / "o").exists()
