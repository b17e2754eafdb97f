"""The exact schemes hold a clusters-by-statistics matrix in this process: before any work, a run whose
matrix would not fit the memory limit (AUTHEVAL_MEMORY_LIMIT, else the available memory) is refused in
one line that names the scheme that fits (`--scheme poisson`), or `--engine spark` when none does."""

from __future__ import annotations

import os

import pytest

from autheval.errors import RecordError
from autheval.estimation.estimators import check_matrix_memory, estimate, matrix_bytes, memory_limit_bytes
from autheval.records.read import read_records
from tests.conftest import reference_file, run_cli

MIXED_CLUSTERS = 2090  # the mixed trace's clusters


@pytest.fixture(scope="module")
def mixed():
    return read_records(reference_file("trace_mixed"), analysis="mixed")


def test_the_matrix_is_clusters_times_statistics_times_copies(mixed):
    assert mixed.n_clusters == MIXED_CLUSTERS
    assert matrix_bytes("reference", MIXED_CLUSTERS) == MIXED_CLUSTERS * 16 * 8 * 3
    assert matrix_bytes("evaluator", MIXED_CLUSTERS) == MIXED_CLUSTERS * 32 * 8 * 3
    assert matrix_bytes("poisson", MIXED_CLUSTERS) == MIXED_CLUSTERS * 16 * 8


@pytest.mark.parametrize(
    "text,expected",
    [("512MB", 512 * 10**6), ("2GB", 2 * 10**9), ("1.5GiB", 3 * 2**29), ("800000", 800_000), ("64 kb", 64_000)],
)
def test_a_declared_limit_is_read(monkeypatch, text, expected):
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", text)
    assert memory_limit_bytes() == expected


def test_a_bad_declared_limit_is_one_line(monkeypatch):
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", "lots")
    with pytest.raises(RecordError, match="AUTHEVAL_MEMORY_LIMIT: must be a size"):
        memory_limit_bytes()


@pytest.mark.parametrize("scheme", ["reference", "evaluator"])
def test_an_exact_scheme_that_does_not_fit_names_the_poisson_scheme(mixed, monkeypatch, scheme):
    limit = matrix_bytes(scheme, MIXED_CLUSTERS) - 1  # one byte short
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", str(limit))
    with pytest.raises(RecordError) as err:
        estimate([mixed], scheme=scheme, reps=100)
    message = str(err.value)
    assert message.startswith(f"--scheme: the {scheme} scheme holds 2,090 clusters x ")
    assert "use --scheme poisson" in message and "AUTHEVAL_MEMORY_LIMIT=" in message
    # the same run fits with the limit its matrix needs, and the poisson scheme fits in the short one
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", str(limit + 1))
    check_matrix_memory(scheme, [mixed])
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", str(limit))
    poisson = estimate([mixed], scheme="poisson", reps=100)
    assert poisson.estimate("mixed", "image_weighted", "Delta_authority")["available"]


def test_when_even_poisson_does_not_fit_the_line_names_spark(mixed, monkeypatch):
    monkeypatch.setenv("AUTHEVAL_MEMORY_LIMIT", "10kB")
    with pytest.raises(RecordError, match="use --engine spark"):
        estimate([mixed], scheme="poisson", reps=100)


def test_the_command_line_refuses_in_one_line_before_writing(tmp_path):
    out = tmp_path / "out"
    env_limit = str(matrix_bytes("reference", MIXED_CLUSTERS) // 2)
    os.environ["AUTHEVAL_MEMORY_LIMIT"] = env_limit
    try:
        result = run_cli(
            "evaluate",
            "--input",
            str(reference_file("trace_mixed")),
            "--scheme",
            "reference",
            "--reps",
            "100",
            "--output-dir",
            str(out),
        )
    finally:
        del os.environ["AUTHEVAL_MEMORY_LIMIT"]
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--scheme poisson" in lines[0] and "2,090 clusters" in lines[0], result.stderr
    assert not out.exists()
