"""Receipts (autheval/reporting/receipt.py): every evaluate, compare and lake run writes receipt.json naming the
SHA-256 of its inputs and outputs; `autheval verify` re-derives the run and names what differs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

EXAMPLE = ROOT.parent / "shared" / "reference" / "examples" / "authority_log_example.csv"


@pytest.fixture
def log(tmp_path) -> Path:
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE} is not here")
    path = tmp_path / "log.csv"
    shutil.copyfile(EXAMPLE, path)
    return path


def test_evaluate_writes_a_receipt_that_verifies(log, tmp_path):
    out = tmp_path / "out"
    assert run_cli("evaluate", "--input", str(log), "--output-dir", str(out), "--reps", "500").returncode == 0
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["command"] == "evaluate" and receipt["config"]["seed"] == 20260710
    assert receipt["inputs"] == [
        {
            "role": "--input",
            "path": str(log.resolve()),
            "sha256": __import__("autheval.io", fromlist=["x"]).file_sha256(log),
        }
    ]
    assert [o["name"] for o in receipt["outputs"]] == [
        "authority_summary.csv",
        "estimates.csv",
        "summary.json",
        "summary.md",
    ]
    assert {"autheval", "duckdb", "pyarrow", "numpy", "python"} <= set(receipt["software"])
    result = run_cli("verify", str(out / "receipt.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "4 of 4 outputs identical"
    again = tmp_path / "again"
    assert run_cli("evaluate", "--input", str(log), "--output-dir", str(again), "--reps", "500").returncode == 0
    # same inputs, same bytes: the receipt holds nothing that changes from run to run, nor where it was written
    assert (out / "receipt.json").read_bytes() == (again / "receipt.json").read_bytes()


def test_a_changed_input_byte_names_the_changed_outputs(log, tmp_path):
    out = tmp_path / "out"
    assert run_cli("evaluate", "--input", str(log), "--output-dir", str(out), "--reps", "500").returncode == 0
    text = log.read_text()
    log.write_text(text.replace("-1.0", "-1.5", 1) if "-1.0" in text else text.replace("1", "2", 1))
    result = run_cli("verify", str(out / "receipt.json"))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"input changed: {log.resolve()} (recorded ")
    assert any(line.startswith("DIFFERENT  summary.json") for line in lines)
    assert lines[-1].endswith("; NOT VERIFIED")


def test_compare_writes_a_receipt_that_verifies(log, tmp_path):
    other = tmp_path / "other.csv"
    shutil.copyfile(log, other)
    out = tmp_path / "out"
    result = run_cli("compare", "--arm", f"A={log}", "--arm", f"B={other}", "--output-dir", str(out), "--reps", "500")
    assert result.returncode == 0, result.stderr
    receipt = json.loads((out / "receipt.json").read_text())
    assert [e["role"] for e in receipt["inputs"]] == ["--arm", "--arm"]
    verified = run_cli("verify", str(out / "receipt.json"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_reference_demo_receipt_verifies(tmp_path):
    lake = tmp_path / "lake"
    assert run_cli("demo", "--lake", str(lake), "--reps", "200").returncode == 0
    receipt = json.loads((lake / "receipt.json").read_text())
    names = {o["name"] for o in receipt["outputs"]}
    assert {"table:estimates", "table:contrasts", "table:records", "table:proposals", "table:images"} <= names
    result = run_cli("verify", str(lake / "receipt.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{len(names)} of {len(names)} outputs identical"
    # the receipt is part of the snapshot it describes
    from warehouse.lake import Lake

    assert "receipt.json" in Lake(lake).snapshot().files


def test_a_lake_receipt_names_a_changed_rules_file(tmp_path):
    from autheval.raw.synth import synth_cohort
    from autheval.review.rules import default_rules_text

    cohort = synth_cohort(60, tmp_path / "cohort", seed=3, size=(64, 48))
    rules = tmp_path / "rules.yaml"
    rules.write_text(default_rules_text())
    lake = tmp_path / "lake"
    result = run_cli(
        "demo",
        "--source",
        "synthetic",
        "--input",
        str(cohort.root),
        "--rules",
        str(rules),
        "--no-models",
        "--evaluate-split",
        "all",
        "--reps",
        "200",
        "--lake",
        str(lake),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rules.write_text(default_rules_text().replace("high: 4.0}", "high: 5.0}", 1))
    verified = run_cli("verify", str(lake / "receipt.json"))
    assert verified.returncode == 1
    lines = verified.stdout.splitlines()
    assert f"input changed: {rules.resolve()}" in lines[0]
    different = {line.split()[1] for line in lines if line.startswith("DIFFERENT")}
    assert {"table:scores", "table:estimates", "table:contexts"} <= different
    assert "table:images" not in different and "identical  table:images" in lines


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not a receipt (unreadable JSON"),
        ('{"receipt_version": 1}', "key 'command': a receipt names this key"),
        (
            '{"receipt_version": 1, "command": "rm", "argv": [], "inputs": [], "outputs": []}',
            "key 'command': must be one of",
        ),
        (
            '{"receipt_version": 1, "command": "evaluate", "argv": ["ui", "--port", "1"], "inputs": [], "outputs": []}',
            "key 'argv': must be a list of strings starting with the command 'evaluate'",
        ),
    ],
)
def test_a_bad_receipt_is_one_line(tmp_path, content, message):
    path = tmp_path / "receipt.json"
    path.write_text(content)
    result = run_cli("verify", str(path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


def test_a_generated_cohort_lake_verifies_wherever_it_lies(tmp_path):
    """The synthetic demo writes its cohort inside the lake: the receipt names the lake's own folder as
    <lake>, and leaves out file times, so the re-run into another folder verifies."""
    lake = tmp_path / "lake"
    result = run_cli("demo", "--source", "synthetic", "--n", "300", "--no-models", "--reps", "200", "--lake", str(lake))
    assert result.returncode == 0, result.stderr[-2000:]
    verified = run_cli("verify", str(lake / "receipt.json"))
    assert verified.returncode == 0, verified.stdout
    assert "identical  table:image_hashes" in verified.stdout.splitlines()


def test_a_tables_hash_is_its_content_not_its_order_place_or_time():
    import pyarrow as pa

    from autheval.reporting.receipt import table_outputs

    one = pa.table({"id": ["b", "a"], "path": ["/lake/x/b.jpg", "/lake/x/a.jpg"], "mtime_ns": [1, 2]})
    same = pa.table({"id": ["a", "b"], "path": ["/other/x/a.jpg", "/other/x/b.jpg"], "mtime_ns": [9, 9]})
    other = pa.table({"id": ["a", "c"], "path": ["/other/x/a.jpg", "/other/x/b.jpg"], "mtime_ns": [9, 9]})
    [h1], [h2], [h3] = (
        table_outputs({"t": t}, root) for t, root in ((one, "/lake"), (same, "/other"), (other, "/other"))
    )
    assert h1["sha256"] == h2["sha256"] != h3["sha256"]


def test_a_table_with_a_dictionary_column_hashes_as_its_values():
    """landed_records.analysis is dictionary-encoded: the receipt's canonical form sorts it as its values
    (an Arrow dictionary column cannot be sorted), so a lake with landed logs gets its receipt."""
    import pyarrow as pa

    from autheval.reporting.receipt import canonical

    plain = pa.table({"analysis": ["b", "a", "b"], "x": [1, 2, 3]})
    encoded = plain.set_column(0, "analysis", plain.column(0).dictionary_encode())
    assert canonical(encoded).equals(canonical(plain))
    assert canonical(encoded).column("analysis").to_pylist() == ["a", "b", "b"]


def test_a_tables_hash_is_its_arrow_ipc_bytes_hashed_as_written():
    """table_sha256 hashes the IPC stream as it is written (the stream never held: a receipt of 10^7
    landed records held it twice): the bytes of the whole stream, a table of several chunks and a
    chunked canonical form alike, so receipts written before verify as they did."""
    import hashlib

    import pyarrow as pa

    from autheval.io import table_sha256
    from autheval.reporting.receipt import canonical

    def whole_stream(table: pa.Table) -> str:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
            writer.write_table(table)
        return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()

    parts = [pa.table({"id": [f"c{i}-{j}" for j in range(3)], "x": [float(j) for j in range(3)]}) for i in range(4)]
    chunked = pa.concat_tables(parts)
    assert chunked.column(0).num_chunks == 4
    assert table_sha256(chunked) == whole_stream(chunked)
    assert table_sha256(canonical(chunked)) == whole_stream(chunked.sort_by([("id", "ascending")]).combine_chunks())
