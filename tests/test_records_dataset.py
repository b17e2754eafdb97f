"""Records as a dataset: a Parquet file, the same rows split into several files (a folder, a glob, a
file:// URI, an object store through the filesystem seam) and the CSV give the same estimates; a broken
rule in a multi-file dataset is named with its file and its row within that file; the data hash of a
dataset is defined without its rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from autheval.errors import RecordError
from autheval.estimation.estimators import estimate
from autheval.io import data_sha256, file_sha256
from autheval.records.read import read_records
from tests.conftest import run_cli

N_CASES, N_CLUSTERS, PARTS = 600, 60, 3


def log_table(n: int = N_CASES, clusters: int = N_CLUSTERS) -> pa.Table:
    """A full-counterfactual log with a global score: about a third of proposals replaced."""
    rng = np.random.default_rng(7)
    i = np.arange(n)
    proposed = rng.integers(0, 4, n)
    changed = rng.random(n) < 0.35
    executed = np.where(changed, (proposed + 1 + rng.integers(0, 3, n)) % 4, proposed)
    u_exec = -rng.integers(0, 50, n) / 10.0
    u_prop = np.where(changed, -rng.integers(0, 60, n) / 10.0, u_exec)
    return pa.table(
        {
            "case_id": [f"c{k:05d}" for k in i],
            "cluster_id": [f"k{k % clusters:04d}" for k in rng.permutation(i)],
            "proposed_action": [f"a{a}" for a in proposed],
            "executed_action": [f"a{a}" for a in executed],
            "utility_executed_local": u_exec,
            "utility_proposed_local": u_prop,
            "utility_proposed_global": -rng.integers(0, 40, n) / 10.0,
        }
    )


def split(table: pa.Table, folder: Path, parts: int = PARTS) -> list[Path]:
    """The rows of `table` in order, in `parts` Parquet files whose names sort in row order."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
    paths = []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        paths.append(folder / f"part-{k:03d}.parquet")
        pq.write_table(table.slice(a, b - a), paths[-1])
    return paths


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    table = log_table()
    single = root / "log.parquet"
    pq.write_table(table, single)
    csv = root / "log.csv"
    pacsv.write_csv(table, csv)
    parts = split(table, root / "parts")
    return {"table": table, "single": single, "csv": csv, "folder": root / "parts", "parts": parts}


def numbers(records, scheme: str, reps: int = 300) -> dict:
    result = estimate([records], scheme=scheme, reps=reps)
    return {
        (r["unit"], r["metric"]): (r["estimate"], r["ci_lower"], r["ci_upper"])
        for r in result.estimates
        if r["available"]
    }


def largest_difference(a: dict, b: dict) -> float:
    assert set(a) == set(b) and a
    return max(abs(x - y) for key in a for x, y in zip(a[key], b[key]))


@pytest.mark.parametrize("scheme", ["reference", "evaluator", "poisson"])
def test_one_file_several_files_and_the_csv_give_the_same_estimates(inputs, scheme, monkeypatch):
    import autheval.records.read as read

    held = [read_records(inputs[k], analysis="log") for k in ("single", "folder", "csv")]
    assert all(r.rows is not None for r in held)  # small: read into memory once (the small-log path)
    monkeypatch.setattr(read, "HELD_ROWS", 0)
    monkeypatch.setattr(read, "HELD_CSV_BYTES", 0)
    single = read_records(inputs["single"], analysis="log")
    several = read_records(inputs["folder"], analysis="log")
    csv = read_records(inputs["csv"], analysis="log")
    assert single.rows is None and several.rows is None and csv.rows is None  # nothing held: scanned where they lie
    assert len(several.dataset.files) == PARTS and several.n_cases == N_CASES and several.n_clusters == N_CLUSTERS
    expected = numbers(single, scheme)
    assert largest_difference(expected, numbers(several, scheme)) <= 1e-12
    assert largest_difference(expected, numbers(csv, scheme)) <= 1e-12
    for records, scanned in zip(held, (single, several, csv)):  # the rows held give the numbers of the scan
        assert (records.n_clusters, records.data_sha256) == (scanned.n_clusters, scanned.data_sha256)
        assert largest_difference(numbers(scanned, scheme), numbers(records, scheme)) == 0.0
    assert expected[("image_weighted", "Delta_authority")][0] != 0.0  # a gap to estimate


def test_a_glob_and_a_file_uri_read_the_same_dataset(inputs):
    folder = inputs["folder"]
    expected = numbers(read_records(folder, analysis="log"), "poisson")
    glob = read_records(f"{folder}/part-*.parquet", analysis="log")
    uri = read_records(folder.as_uri(), analysis="log")
    assert uri.source == folder.as_uri() and len(uri.dataset.files) == PARTS
    assert largest_difference(expected, numbers(glob, "poisson")) == 0.0
    assert largest_difference(expected, numbers(uri, "poisson")) == 0.0
    assert glob.data_sha256 == uri.data_sha256 == read_records(folder, analysis="log").data_sha256


def test_the_data_hash_of_a_dataset(inputs):
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(inputs["parts"])]
    expected = hashlib.sha256("".join(d + "\n" for d in digests).encode("ascii")).hexdigest()
    assert read_records(inputs["folder"]).data_sha256 == expected == data_sha256(inputs["folder"])
    # one file: its own SHA-256, as before datasets, however it is named
    single = inputs["single"]
    own = hashlib.sha256(single.read_bytes()).hexdigest()
    assert read_records(single).data_sha256 == own == file_sha256(single)
    assert read_records(single.as_uri()).data_sha256 == own
    # the order of the files is part of the data: the same files under other names hash otherwise
    assert expected != hashlib.sha256("".join(d + "\n" for d in reversed(digests)).encode()).hexdigest()


def test_hidden_files_and_other_files_of_a_folder_are_not_records(inputs, tmp_path):
    folder = tmp_path / "parts"
    split(inputs["table"], folder)
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".part-000.parquet.tmp").write_bytes(b"half a file")
    (folder / "README.txt").write_text("not records")
    assert read_records(folder).n_cases == N_CASES


def broken_parts(inputs, tmp_path: Path, part: int, row: int, column: str, value) -> Path:
    """The split dataset with one value replaced: file `part`, row `row` (0-based within the file)."""
    folder = tmp_path / "broken"
    paths = split(inputs["table"], folder)
    table = pq.read_table(paths[part])
    values = table.column(column).to_pylist()
    values[row] = value
    pq.write_table(
        table.set_column(
            table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
        ),
        paths[part],
    )
    return paths[part]


def test_a_broken_rule_names_the_file_and_its_row_within_the_file(inputs, tmp_path):
    broken = broken_parts(inputs, tmp_path, part=1, row=6, column="utility_executed_local", value=float("inf"))
    with pytest.raises(RecordError) as err:
        read_records(tmp_path / "broken")
    message = str(err.value)
    assert message.startswith(f"{broken}: column 'utility_executed_local': must be a finite number")
    assert "(row 7, id " in message  # the 7th row of that file, not of the dataset (row 207)
    assert err.value.source == str(broken)


def test_a_duplicate_id_across_files_names_the_later_file_and_row(inputs, tmp_path):
    first_id = inputs["table"].column("case_id")[0].as_py()
    broken = broken_parts(inputs, tmp_path, part=2, row=3, column="case_id", value=first_id)
    with pytest.raises(RecordError, match="must be unique") as err:
        read_records(tmp_path / "broken")
    assert str(err.value).startswith(f"{tmp_path / 'broken' / 'part-000.parquet'}: column 'case_id'")
    assert f"id {first_id!r}" in str(err.value) and "row 1," in str(err.value)
    assert err.value.source != str(broken)  # the first row holding the repeated id is in the first file


def test_files_with_other_columns_are_named(inputs, tmp_path):
    folder = tmp_path / "mixed"
    paths = split(inputs["table"], folder)
    pq.write_table(pq.read_table(paths[2]).drop_columns(["utility_proposed_global"]), paths[2])
    with pytest.raises(RecordError, match="has other columns or types than") as err:
        read_records(folder)
    assert str(err.value).startswith(f"{paths[2]}: column 'utility_proposed_global'")


@pytest.mark.parametrize(
    "make,rule",
    [
        (lambda d: d.mkdir(), "the folder holds no Parquet file"),
        (lambda d: None, "file not found"),
    ],
)
def test_a_dataset_with_no_files_is_one_line(tmp_path, make, rule):
    folder = tmp_path / "empty"
    make(folder)
    with pytest.raises(RecordError, match=rule):
        read_records(folder if folder.exists() else folder / "log.parquet")
    with pytest.raises(RecordError, match="no file matches"):
        read_records(tmp_path / "*.parquet")


def test_an_object_store_is_read_through_the_filesystem_seam(inputs, monkeypatch):
    """A URI whose scheme is not file:// resolves through warehouse.filesystem.lake_location to a
    pyarrow filesystem, and DuckDB reads the files through it (fsspec): stood in for here by a
    local filesystem under a made-up scheme, so the remote code path runs offline."""
    import warehouse.filesystem as seam

    folder = inputs["folder"]
    real = seam.lake_location

    def fake(root):
        text = str(root)
        if text.startswith("teststore://"):
            return seam.LakeLocation(pafs.LocalFileSystem(), text[len("teststore://") - 1 :].rstrip("/"), "teststore")
        return real(root)

    monkeypatch.setattr(seam, "lake_location", fake)
    remote = read_records(f"teststore://{folder}", analysis="log")
    assert remote.dataset.protocol is not None and remote.dataset.names[0].startswith("teststore://")
    local = numbers(read_records(folder, analysis="log"), "poisson")
    assert largest_difference(local, numbers(remote, "poisson")) == 0.0


def test_evaluate_takes_a_folder_and_a_file_uri(inputs, tmp_path):
    outputs = {}
    for label, given in (
        ("file", str(inputs["single"])),
        ("folder", str(inputs["folder"])),
        ("uri", inputs["folder"].as_uri()),
    ):
        out = tmp_path / label
        result = run_cli(
            "evaluate",
            "--input",
            given,
            "--scheme",
            "poisson",
            "--reps",
            "200",
            "--output-dir",
            str(out),
            "--no-progress",
        )
        assert result.returncode == 0, result.stderr
        summary = json.loads((out / "summary.json").read_text())
        receipt = json.loads((out / "receipt.json").read_text())
        assert receipt["inputs"][0]["path"] == (given if label == "uri" else str(Path(given).resolve()))
        assert receipt["inputs"][0]["sha256"] == summary["data_sha256"]
        outputs[label] = summary
    assert outputs["folder"]["data_sha256"] == outputs["uri"]["data_sha256"] != outputs["file"]["data_sha256"]
    assert outputs["file"]["metrics"]["Delta_authority"]["estimate"] == pytest.approx(
        outputs["uri"]["metrics"]["Delta_authority"]["estimate"], abs=1e-12
    )


def test_a_broken_multi_file_dataset_is_one_line_and_exit_2(inputs, tmp_path):
    broken = broken_parts(inputs, tmp_path, part=2, row=0, column="proposed_action", value=None)
    out = tmp_path / "out"
    result = run_cli("evaluate", "--input", str(tmp_path / "broken"), "--output-dir", str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(broken) in lines[0] and "column 'proposed_action'" in lines[0]
    assert "row 1," in lines[0] and not out.exists()


def test_spark_reads_the_files_itself_and_gives_the_same_estimates(inputs):
    """--engine spark: the engine reads the dataset's Parquet files (its `records` view scans exactly
    those files; no record passes through this process) and the estimates and delta-method intervals
    equal the default engine's (1e-12)."""
    from tests.test_engines import spark_missing

    reason = spark_missing()
    if reason:
        pytest.skip(f"Spark cases skipped: {reason}")
    from autheval.estimation.analytic import delta_method_rows
    from warehouse.engine import EngineConfig, connect_engine

    several = read_records(inputs["folder"], analysis="log")
    expected = numbers(several, "poisson", reps=50)
    local_delta = {(r["unit"], r["metric"]): r for r in delta_method_rows([several])}
    with connect_engine(EngineConfig("spark", spark_cores=2, shuffle_partitions=4)) as spark:
        result = estimate([several], scheme="poisson", reps=50, engine=spark)
        read = sorted(Path(f.replace("file:", "", 1)).resolve() for f in spark.session.table("records").inputFiles())
        assert read == sorted(p.resolve() for p in inputs["parts"])
        assert spark._registered == 2  # what this process shipped: the point's weights and the replicate ids only
        spark_delta = delta_method_rows([several], engine=spark)
    got = {
        (r["unit"], r["metric"]): (r["estimate"], r["ci_lower"], r["ci_upper"])
        for r in result.estimates
        if r["available"]
    }
    assert largest_difference(expected, got) <= 1e-12
    for row in spark_delta:
        if row["available"]:
            mine = local_delta[(row["unit"], row["metric"])]
            assert abs(row["ci_lower"] - mine["ci_lower"]) <= 1e-12 and abs(row["ci_upper"] - mine["ci_upper"]) <= 1e-12


def test_verify_rehashes_a_dataset_input(inputs, tmp_path):
    out = tmp_path / "out"
    folder = tmp_path / "parts"
    split(inputs["table"], folder)
    assert (
        run_cli(
            "evaluate",
            "--input",
            str(folder),
            "--scheme",
            "poisson",
            "--reps",
            "100",
            "--output-dir",
            str(out),
            "--no-progress",
        ).returncode
        == 0
    )
    assert run_cli("verify", str(out / "receipt.json")).returncode == 0
    table = pq.read_table(folder / "part-002.parquet")  # one file of the dataset changes: its data hash does
    pq.write_table(table.slice(0, table.num_rows - 1), folder / "part-002.parquet")
    changed = run_cli("verify", str(out / "receipt.json"))
    assert changed.returncode == 1 and str(folder) in changed.stdout + changed.stderr


@pytest.mark.parametrize(
    "text,rule",
    [
        (b"case_id,proposed_action,executed_action,utility_executed_local\nc1,a,a,0\nc2,a\n", "cannot be read as CSV"),
        (
            b"case_id,proposed_action,executed_action,utility_executed_local\nc1,a,a,0\n\xff\xfe,a,a,0\n",
            "cannot be read as CSV",
        ),
    ],
)
def test_a_csv_the_reader_refuses_is_one_line(tmp_path, text, rule):
    """A CSV scanned by DuckDB: a ragged row or bad encoding is a RecordError naming the file."""
    path = tmp_path / "log.csv"
    path.write_bytes(text)
    with pytest.raises(RecordError, match=rule) as err:
        read_records(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


HEADER = b"case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local\n"


@pytest.mark.parametrize(
    "body",
    [
        b"c1,k1,a,a,0,0\nc2,k1,a\n",  # a ragged row
        b"c1,k1,a,a,0,0\n\xff\xfe,k1,a,a,0,0\n",  # bad encoding
        b"c1,k1,a,b,0,x\n",  # not a number
        b"c1,k1,a,b,0,1e309\n",  # not finite
        b"c1,k1,a,b,0,-1\nc1,k2,a,a,0,0\n",  # a repeated id
        b"c1,k1 ,a,b,0,-1\n",  # a trailing space in an id
        b"c1,k1,a,,0,-1\n",  # an empty selection beside selected rows
        b'c1,k1,a,b,"1e306",-1\nc2,k1,a,b,1e306,-1\n',  # sums that overflow (a quoted number)
    ],
)
def test_a_record_read_into_memory_is_refused_as_one_scanned(tmp_path, monkeypatch, body):
    """The small-log path (a record read into memory once) refuses bad input in the line of a record
    scanned where it lies: the same file, column, rule, row and id."""
    import autheval.records.read as read

    path = tmp_path / "log.csv"
    path.write_bytes(HEADER + b"c0,k0,a,b,0,-1\n" + body)
    messages = []
    for held in (True, False):
        if not held:
            monkeypatch.setattr(read, "HELD_CSV_BYTES", 0)
        with pytest.raises(RecordError) as err:
            read_records(path)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and messages[0].startswith(str(path)) and "\n" not in messages[0]


def test_a_damaged_parquet_file_is_one_line_read_into_memory_or_scanned(inputs, tmp_path, monkeypatch):
    """A page the Parquet reader refuses (DuckDB's plain Error, "Invalid data") is the file's one line."""
    import autheval.records.read as read

    damaged = tmp_path / "log.parquet"
    data = inputs["single"].read_bytes()
    damaged.write_bytes(data[:4] + bytes(len(data) // 2) + data[len(data) // 2 + 4 :])  # pages zeroed, footer kept
    messages = []
    for held in (True, False):
        if not held:
            monkeypatch.setattr(read, "HELD_ROWS", 0)
        with pytest.raises(RecordError, match="cannot be read as Parquet") as err:
            read_records(damaged)
        messages.append(str(err.value))
    assert messages[0].startswith(str(damaged)) and "\n" not in messages[0]


def test_a_small_record_is_read_once_and_a_larger_one_is_let_go_after_its_sums(inputs, monkeypatch):
    import autheval.records.read as read

    kept = read_records(inputs["csv"], analysis="log")
    assert kept.rows is not None and kept.rows.num_rows == N_CASES
    monkeypatch.setattr(read, "KEPT_ROWS", N_CASES - 1)  # read into memory, summed, then not kept
    summed = read_records(inputs["csv"], analysis="log")
    assert summed.rows is None and summed.dataset is not None
    assert numbers(summed, "evaluator") == numbers(kept, "evaluator")
