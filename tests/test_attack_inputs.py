"""Hostile inputs found by an attacker: receipts (verify), dataset listing and URIs, output folders that are
inputs, protocol site overrides, mavic score's groups and configuration. Each refusal is one line, exit 2
(a changed input in verify: exit 1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autheval.errors import RecordError
from tests.conftest import ROOT, run_cli

EXAMPLE = ROOT.parent / "shared" / "reference" / "examples" / "authority_log_example.csv"


def cli(*args, cwd=None, timeout=120):
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DS_ACCELERATOR": "cpu"}
    try:
        return run_cli(*args, cwd=cwd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"autheval {' '.join(args)[:200]} ran past {timeout} s")


def one_line(result, *words, code=2):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One evaluate run: its log and its receipt (read as a dict)."""
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE} is not here")
    root = tmp_path_factory.mktemp("made")
    log = root / "log.csv"
    shutil.copyfile(EXAMPLE, log)
    out = root / "out"
    result = cli("evaluate", "--input", str(log), "--output-dir", str(out), "--reps", "200", "--no-progress")
    assert result.returncode == 0, result.stderr
    return log, json.loads((out / "receipt.json").read_text())


def _write(tmp_path, receipt) -> Path:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    return path


# --- 1: a changed or missing input makes verify exit 1 --------------------------------------------------


def test_verify_exits_1_when_an_input_is_gone(made, tmp_path):
    log, receipt = made
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    broken = json.loads(json.dumps(receipt))
    broken["inputs"][0]["path"] = str(fifo)
    broken["argv"] = [str(fifo) if a == str(log) else a for a in broken["argv"]]
    result = cli("verify", str(_write(tmp_path, broken)), timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "now missing" in result.stdout and "NOT VERIFIED" in result.stdout


def test_verification_is_not_identical_when_an_input_changed():
    from autheval.reporting.receipt import Verdict, Verification

    same = [Verdict("a.csv", "0" * 64, "0" * 64)]
    assert Verification([Verdict("/x/log.csv", "1" * 64, None)], same, {}).identical is False
    assert Verification([Verdict("/x/log.csv", "1" * 64, "1" * 64)], same, {}).identical is True


# --- 2: argv against inputs, output names, repeated inputs, config numbers, "key" not "column" ------------


@pytest.mark.parametrize(
    "change, key, words",
    [
        (lambda r, log: r["argv"].extend(["--input", "/etc/passwd"]), "argv", "not one of the receipt's hashed"),
        (lambda r, log: r["argv"].extend(["--inp", "/etc/passwd"]), "argv", "not a command line of evaluate"),
        (lambda r, log: r.update(argv=[a if a != str(log) else "log.csv" for a in r["argv"]]), "argv", "relative"),
        (lambda r, log: r["outputs"][0].update(name="../../x"), "outputs[0].name", "relative name inside"),
        (lambda r, log: r["outputs"][0].update(name="/tmp/x.csv"), "outputs[0].name", "relative name inside"),
        (lambda r, log: r["inputs"].append(dict(r["inputs"][0])), "inputs[1].path", "named twice"),
        (lambda r, log: r["config"].update(reps=float("inf")), "config.reps", "finite"),
        (lambda r, log: r["config"].update(reps=2.5), "config.reps", "whole number"),
    ],
)
def test_a_receipt_that_reads_elsewhere_is_refused(made, tmp_path, change, key, words):
    from functools import partial

    from autheval.cli.main import build_parser
    from autheval.cli.verify import read_checked_receipt

    read_receipt = partial(read_checked_receipt, build_parser=build_parser)

    log, receipt = made
    broken = json.loads(json.dumps(receipt))
    change(broken, log)
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(broken).replace("Infinity", "1e999"))
    with pytest.raises(RecordError) as err:
        read_receipt(path)
    text = str(err.value)
    assert f"key '{key}'" in text and words in text and "column" not in text and "\n" not in text, text


def test_the_receipt_as_written_still_reads(made, tmp_path):
    from autheval.reporting.receipt import read_receipt

    _, receipt = made
    assert read_receipt(_write(tmp_path, receipt))["argv"] == receipt["argv"]


# --- 3: a receipt that is not a regular file ------------------------------------------------------------


def test_verify_of_a_fifo_is_one_line(tmp_path):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    one_line(cli("verify", str(fifo), timeout=10), "not a regular file")


# --- 4: a URI's host and port ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri, words",
    [
        ("s3://bucket/x.parquet?endpoint_override=127.0.0.1:99999&scheme=http", "1 to 65535"),
        ("s3://bucket/x.parquet?endpoint_override=127.0.0.1:0&scheme=http", "1 to 65535"),
        ("s3://bucket:99999/x.parquet", "1 to 65535"),
        ("s3://bucket/x.parquet?endpoint_override=bad%20host:80", "not a host name"),
    ],
)
def test_a_uri_port_out_of_range_is_refused(uri, words):
    from autheval.io import dataset_files

    with pytest.raises(RecordError) as err:
        dataset_files(uri)
    assert str(err.value).startswith(uri) and words in str(err.value), str(err.value)


def test_an_unreachable_store_names_the_input():
    from autheval.io import dataset_files

    uri = "s3://bucket/x.parquet?endpoint_override=127.0.0.1:1&scheme=http&region=us-east-1"
    with pytest.raises(OSError) as err:
        dataset_files(uri)
    assert err.value.filename == uri, err.value


# --- 5: a glob lists and checks only what it matches -------------------------------------------------------


@pytest.fixture
def globbed(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    g = tmp_path / "g"
    (g / "loopdir").mkdir(parents=True)
    (g / "loopdir" / "self").symlink_to("..")
    os.mkfifo(g / "zz.fifo")
    os.mkfifo(g / "zz.parquet")
    pq.write_table(pa.table({"a": [1]}), g / "x1.parquet")
    return g


def test_a_glob_does_not_walk_what_it_cannot_match(globbed):
    from autheval.io import dataset_files

    _, paths, _ = dataset_files(str(globbed / "x*.parquet"))
    assert paths == [str(globbed / "x1.parquet")]
    with pytest.raises(RecordError) as err:
        dataset_files(str(globbed / "nomatch*.parquet"))
    assert "no file matches 'nomatch*.parquet'" in str(err.value) and "zz" not in str(err.value), str(err.value)
    with pytest.raises(RecordError) as err:  # a FIFO the glob matches is still refused
        dataset_files(str(globbed / "z*.parquet"))
    assert "not a regular file" in str(err.value)


# --- 6: the output folder is never an input, nor inside one ------------------------------------------------


@pytest.fixture
def dataset_folder(tmp_path):
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE} is not here")
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    folder = tmp_path / "oi5"
    folder.mkdir()
    pq.write_table(pacsv.read_csv(EXAMPLE), folder / "a.parquet")
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "--input", "{d}", "--output-dir", "{d}"],
        ["evaluate", "--input", "{d}/*.parquet", "--output-dir", "{d}/sub"],
        ["evaluate", "--input", "file://{d}", "--output-dir", "{d}"],
        ["evaluate", "--input", "{d}", "--by", "site", "--output-dir", "{d}"],
        ["compare", "--arm", "A={d}", "--arm", "B={d}/a.parquet", "--output-dir", "{d}"],
        ["compare", "--unpaired", "--arm", "A={d}", "--arm", "B={d}/a.parquet", "--output-dir", "{d}/x"],
    ],
)
def test_an_output_folder_in_an_input_folder_is_refused(dataset_folder, args):
    before = sorted(os.listdir(dataset_folder))
    result = cli(*[a.format(d=dataset_folder) for a in args], "--reps", "100", "--no-progress")
    one_line(result, "--output-dir", "the input")
    assert sorted(os.listdir(dataset_folder)) == before


def test_an_output_file_in_an_input_folder_is_refused(tmp_path):
    from autheval.cli.flags import check_not_an_input

    (tmp_path / "ds").mkdir()
    for given in (tmp_path / "ds", f"{tmp_path}/ds/*.parquet", f"file://{tmp_path}/ds"):
        with pytest.raises(RecordError) as err:
            check_not_an_input([tmp_path / "ds" / "out.parquet"], [("--input", given)], "--output")
        assert "--output" in str(err.value) and "would change the input" in str(err.value)
    check_not_an_input([tmp_path / "out.parquet"], [("--input", tmp_path / "ds")], "--output")  # beside it: fine


# --- 7: protocol site overrides follow the shared name rule --------------------------------------------------


@pytest.mark.parametrize(
    "sites, words",
    [
        ("{all: {min_clusters: 50}}", "'all'"),
        ('{" north": {min_clusters: 50}}', "whitespace"),
        ("{north: {min_clusters: 50}, North: {min_clusters: 40}}", "name one site"),
    ],
)
def test_a_bad_site_override_name_is_refused(sites, words):
    from autheval.monitoring.protocol import default_protocol_text, parse_protocol

    text = default_protocol_text()
    assert "\nsites: {}\n" in text
    with pytest.raises(RecordError) as err:
        parse_protocol(text.replace("\nsites: {}\n", f"\nsites: {sites}\n"), "p.yaml")
    assert "sites" in str(err.value) and words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_good_site_override_still_reads():
    from autheval.monitoring.protocol import default_protocol_text, parse_protocol

    text = default_protocol_text().replace("\nsites: {}\n", "\nsites: {north: {min_clusters: 50}}\n")
    assert "north" in parse_protocol(text, "p.yaml").sites


# --- 8: mavic score: whitespace never stripped, arithmetic never overflows ----------------------------------

MEL = {"pigment_network": "atypical", "streaks": "irregular", "blue_whitish_veil": "present"}


def _completion(diagnosis="MEL"):
    return f"<morph>{json.dumps(MEL)}</morph>\n<final_diagnosis>{diagnosis}</final_diagnosis>"


@pytest.mark.parametrize(
    "column, values",
    [
        ("group_id", dict(group_id=["g1", "g1 "])),
        ("modality", dict(modality=["dermoscopic", " dermoscopic"])),
        ("reference_diagnosis", dict(reference_diagnosis=["MEL", "MEL "])),
    ],
)
def test_mavic_refuses_whitespace_in_labels(column, values):
    from models.mavic import score_completions

    given = dict(modality=["dermoscopic"] * 2, reference_diagnosis=["MEL"] * 2, group_id=["g1", "g1"])
    given.update(values)
    with pytest.raises(RecordError) as err:
        score_completions(
            [_completion()] * 2, given["modality"], given["reference_diagnosis"], [MEL] * 2, given["group_id"]
        )
    assert err.value.column == column and "whitespace" in str(err.value), str(err.value)


@pytest.mark.parametrize("key", ["lambda_hier", "lambda_morph", "default_weight", "gate_k", "pmi_floor"])
def test_mavic_config_numbers_are_bounded(tmp_path, key):
    from models.mavic import load_config

    path = tmp_path / "config.yaml"
    path.write_text(f"{key}: 1.0e308\n")
    with pytest.raises(RecordError) as err:
        load_config(path)
    assert err.value.column == key, str(err.value)


def test_mavic_score_cli_refuses_a_trailing_space_in_group_id(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "completion": [_completion()] * 2,
            "modality": ["dermoscopic"] * 2,
            "reference_diagnosis": ["MEL"] * 2,
            "reference_attributes": [json.dumps(MEL)] * 2,
            "group_id": ["g1", "g1 "],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    one_line(
        cli("mavic", "score", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "o.csv")),
        "group_id",
        "whitespace",
    )


# --- 9: a FIFO as --input; a file:// URI to one CSV file ----------------------------------------------------


def test_a_fifo_input_is_not_a_regular_file(tmp_path):
    from autheval.records.datasets import open_dataset

    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(RecordError) as err:
        open_dataset(str(fifo))
    assert "not a regular file" in str(err.value), str(err.value)


def test_a_file_uri_to_one_csv_file_is_read(tmp_path):
    if not EXAMPLE.is_file():
        pytest.skip(f"{EXAMPLE} is not here")
    from autheval.records.datasets import open_dataset

    log = tmp_path / "log.csv"
    shutil.copyfile(EXAMPLE, log)
    dataset, _, _ = open_dataset(f"file://{log}")
    assert dataset.kind == "csv"
