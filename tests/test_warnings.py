"""Warnings a user should see (one line each) and the replicate cap: ignored columns, degenerate
intervals, a comparison without a contrast, --reps beyond the documented maximum."""

from __future__ import annotations

import io
import warnings

import pyarrow as pa
import pytest

from autheval.errors import RecordError
from autheval.estimation.estimators import (
    MAX_REPS,
    MIN_CLUSTERS,
    EstimationResult,
    degenerate_warnings,
    estimate,
    warn_if_no_contrast,
)
from autheval.records.read import read_records, records_from_table
from autheval.records.warnings import AuthEvalWarning, print_warnings_plainly
from tests.conftest import reference_file, run_cli

HEADER = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"
ROWS = ["c1,k1,a0,a0,0.0,0.0", "c2,k2,a1,a0,-1.0,-2.0", "c3,k2,a2,a2,-0.5,-0.5", "c4,k3,a1,a0,-1.0,-0.5"]


def write(tmp_path, header=HEADER, rows=ROWS, name="log.csv"):
    path = tmp_path / name
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def messages(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, AuthEvalWarning)]


# --- ignored columns -----------------------------------------------------------------------------


def test_unused_columns_are_listed(tmp_path):
    path = write(tmp_path, HEADER + ",notes,reviewer", [r + ",x,y" for r in ROWS])
    with pytest.warns(AuthEvalWarning, match="columns not used") as record:
        records = read_records(path)
    assert records.unused_columns == ("notes", "reviewer")
    assert any(str(path) in m and "notes, reviewer" in m for m in messages(record))


def test_known_trace_columns_and_used_columns_are_not_listed(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuthEvalWarning)
        trace = read_records(reference_file("trace_mixed"))  # policy_id, slate_size, intervened, ...
        assert trace.unused_columns == ()
        table = pa.table(
            {
                "case_id": ["a", "b"],
                "proposed_action": ["x", "y"],
                "executed_action": ["x", "x"],
                "utility_executed_local": [0.0, -1.0],
                "batch": ["1", "1"],
            }
        )
        records = records_from_table(table, "landed", "landed", "0" * 64, used=("batch",))
        assert records.unused_columns == ()


def test_an_unused_column_close_to_a_used_name_that_is_present_is_only_listed(tmp_path):
    """cluster_id2 beside cluster_id is another column, not a misspelling."""
    path = write(tmp_path, HEADER + ",cluster_id2", [r + ",z" for r in ROWS])
    with pytest.warns(AuthEvalWarning, match="cluster_id2"):
        records = read_records(path)
    assert records.n_clusters == 3


def test_cli_prints_unused_columns_on_stderr(tmp_path):
    path = write(tmp_path, HEADER + ",notes", [r + ",x" for r in ROWS])
    result = run_cli("evaluate", "--input", str(path), "--output-dir", str(tmp_path / "out"), "--reps", "1000")
    assert result.returncode == 0, result.stderr
    assert "columns not used (ignored): notes" in result.stderr
    assert "notes" not in result.stdout


# --- one-line warnings for the command line -------------------------------------------------------


def test_print_warnings_plainly():
    stream = io.StringIO()
    with warnings.catch_warnings():
        print_warnings_plainly(stream)
        warnings.warn("first", AuthEvalWarning, stacklevel=2)
        warnings.warn("first", AuthEvalWarning, stacklevel=2)  # every time, not once per place
    assert stream.getvalue() == "autheval: warning: first\nautheval: warning: first\n"


# --- degenerate intervals ------------------------------------------------------------------------


def test_fewer_than_1000_replicates_warn(tmp_path):
    records = read_records(write(tmp_path))
    with pytest.warns(AuthEvalWarning, match="999 bootstrap replicates") as record:
        result = estimate([records], scheme="reference", reps=999)
    assert any("fewer than 1000" in m for m in result.warnings)
    assert messages(record) == result.warnings


def test_enough_replicates_and_clusters_do_not_warn(tmp_path):
    """MIN_CLUSTERS clusters, each with a change: no small-sample line (tests/test_small_samples.py has those)."""
    rows = [f"c{i},k{i},a1,a0,{-1.0 - i % 3},{-0.5 * (i % 4)}" for i in range(MIN_CLUSTERS)]
    records = read_records(write(tmp_path, rows=rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuthEvalWarning)
        result = estimate([records], scheme="evaluator", reps=1000)
    assert result.warnings == []


def test_one_cluster_warns(tmp_path):
    records = read_records(write(tmp_path, rows=[r.replace(",k2,", ",k1,").replace(",k3,", ",k1,") for r in ROWS]))
    assert records.n_clusters == 1
    with pytest.warns(AuthEvalWarning, match="one cluster"):
        result = estimate([records], scheme="reference", reps=1000)
    assert len(result.warnings) == 1 and "degenerate" in result.warnings[0]


def fake_result(estimate_value, lower, upper, reps=5000) -> EstimationResult:
    records = read_records(reference_file("authority_log_example"), analysis="log")
    row = {
        "analysis": "log",
        "unit": "image_weighted",
        "metric": "delta",
        "estimate": estimate_value,
        "ci_lower": lower,
        "ci_upper": upper,
        "available": True,
    }
    return EstimationResult("reference", reps, 1, (0.025, 0.975), {"log": records}, estimates=[row])


def test_an_interval_that_excludes_its_point_warns():
    assert degenerate_warnings(fake_result(0.5, 0.1, 0.9)) == []
    assert degenerate_warnings(fake_result(0.5, 0.5, 0.5)) == []  # a point interval containing it
    assert degenerate_warnings(fake_result(0.5, 0.5 + 1e-15, 0.6)) == []  # rounding, not exclusion
    (message,) = degenerate_warnings(fake_result(0.5, 0.6, 0.9))
    assert "excludes its own point estimate" in message and "delta (image_weighted)" in message
    (message,) = degenerate_warnings(fake_result(0.5, 0.1, 0.4))
    assert "excludes its own point estimate" in message


# --- compare without a contrast ------------------------------------------------------------------


def test_one_arm_compare_warns():
    with pytest.warns(AuthEvalWarning, match="one arm .*no paired contrast"):
        assert warn_if_no_contrast(["LLaVA-Med head"], [])
    with warnings.catch_warnings():
        warnings.simplefilter("error", AuthEvalWarning)
        assert not warn_if_no_contrast(["a", "b"], [("b", "a")])


# --- the replicate cap ---------------------------------------------------------------------------


@pytest.mark.parametrize("reps", [0, -5, MAX_REPS + 1, 10**9])
def test_reps_out_of_range_is_an_error_naming_the_flag(tmp_path, reps):
    records = read_records(write(tmp_path))
    with pytest.raises(RecordError, match=r"--reps: must be between 1 and 1,000,000"):
        estimate([records], reps=reps)


def test_cli_refuses_reps_beyond_the_maximum(tmp_path):
    out = tmp_path / "out"
    result = run_cli("evaluate", "--input", str(write(tmp_path)), "--reps", str(MAX_REPS + 1), "--output-dir", str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--reps" in lines[0] and "1,000,000" in lines[0]
    assert not out.exists()
