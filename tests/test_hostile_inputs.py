"""Hostile inputs to the record readers, receipts, `query` and `mavic score` (issue 27, items 3, 8, 10, 13,
20, 21): an object-store URI parsed as a URI (its query string reaches the declared endpoint, a real local
HTTP server here), relative paths that verify, the lake's own folder as `<lake>` in `producer`, folders
mixing file types, symbolic-link loops, files named like patterns, a million columns, duplicate output
columns, exact decimals, every field of a receipt checked, and hidden files skipped where files are listed."""

from __future__ import annotations

import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from autheval.errors import RecordError
from autheval.records.read import read_records
from tests.conftest import ROOT

N = 40


def log_table(start: int = 0, n: int = N) -> pa.Table:
    """A small full-counterfactual log: ids c<start>..c<start + n - 1>, a few changed proposals."""
    ids = range(start, start + n)
    return pa.table(
        {
            "case_id": [f"c{i:04d}" for i in ids],
            "cluster_id": [f"k{i % 10}" for i in ids],
            "proposed_action": [f"a{i % 4}" for i in ids],
            "executed_action": [f"a{(i + (i % 3 == 0)) % 4}" for i in ids],
            "utility_executed_local": [-(i % 5) / 2 for i in ids],
            "utility_proposed_local": [-(i % 7) / 2 if i % 3 == 0 else -(i % 5) / 2 for i in ids],
        }
    )


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`autheval ARGS` in a fresh interpreter; a run past `timeout` fails the test (it would hang)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "autheval", *args], cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"autheval {' '.join(args)[:200]} ran past {timeout} s")


def one_line(result, *words, code=2):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("autheval: error:"), result.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]


def evaluate(*inputs: str, out: Path, cwd: Path | None = None, timeout: float = 120):
    return cli(
        "evaluate",
        "--input",
        *inputs,
        "--reps",
        "200",
        "--no-progress",
        "--output-dir",
        str(out),
        cwd=cwd,
        timeout=timeout,
    )


# ---------------------------------------------------------------- 3. an object-store URI is a URI


class S3Stub:
    """A local HTTP server answering the S3 calls pyarrow makes (HEAD, ListObjectsV2, ranged GET) for the
    objects of one bucket, recording every request: the declared endpoint of a URI."""

    def __init__(self, bucket: str, objects: dict[str, bytes]):
        self.bucket, self.objects, self.requests = bucket, objects, []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: bytes = b"", headers=()):
                self.send_response(code)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _key(self):
                parts = urlsplit(self.path)
                path = parts.path.lstrip("/")
                bucket, _, key = path.partition("/")
                return bucket, key, parse_qs(parts.query, keep_blank_values=True)

            def do_HEAD(self):
                stub.requests.append(("HEAD", self.path, self.headers.get("Authorization", "")))
                bucket, key, _ = self._key()
                if bucket != stub.bucket:
                    return self._send(404)
                if not key:
                    return self._send(200)
                if key in stub.objects:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(stub.objects[key])))
                    self.end_headers()
                    return None
                return self._send(404)

            def do_GET(self):
                stub.requests.append(("GET", self.path, self.headers.get("Authorization", "")))
                bucket, key, query = self._key()
                if bucket != stub.bucket:
                    return self._send(404)
                if not key and "list-type" in query:
                    return self._send(200, stub.listing(query), [("Content-Type", "application/xml")])
                data = stub.objects.get(key)
                if data is None:
                    return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
                wanted = self.headers.get("Range")
                if wanted:
                    first, last = wanted.split("=")[1].split("-")
                    first, last = int(first), min(int(last or len(data) - 1), len(data) - 1)
                    span = f"bytes {first}-{last}/{len(data)}"
                    return self._send(206, data[first : last + 1], [("Content-Range", span)])
                return self._send(200, data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def listing(self, query) -> bytes:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        contents, prefixes = [], set()
        for key in sorted(self.objects):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter)[0] + delimiter)
            else:
                contents.append(
                    f"<Contents><Key>{key}</Key><Size>{len(self.objects[key])}</Size>"
                    "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
                )
        common = "".join(f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>" for p in sorted(prefixes))
        return (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{self.bucket}</Name><Prefix>{prefix}</Prefix><KeyCount>{len(contents)}</KeyCount>"
            f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{''.join(contents)}{common}</ListBucketResult>"
        ).encode()

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def aws_environment(monkeypatch):
    """Credentials in the environment (as a user's shell has them), no instance metadata lookups."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "environment-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environment-secret")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def test_an_object_store_uri_reaches_its_declared_endpoint_with_its_query(aws_environment):
    """`?` opens the URI's query string, not a glob: the declared endpoint gets every request, and the
    records it serves are read (a folder and a glob of its path alike)."""
    objects = {"logs/part-0.parquet": parquet_bytes(log_table(0)), "logs/part-1.parquet": parquet_bytes(log_table(N))}
    with S3Stub("bucket", objects) as stub:
        query = f"endpoint_override=127.0.0.1:{stub.port}&scheme=http&region=us-east-1"
        folder = read_records(f"s3://bucket/logs/?{query}")
        assert folder.n_cases == 2 * N and folder.analysis == "logs"
        assert folder.dataset.names == ("s3://bucket/logs/part-0.parquet", "s3://bucket/logs/part-1.parquet")
        globbed = read_records(f"s3://bucket/logs/*-1.parquet?{query}")
        assert globbed.n_cases == N
    assert stub.requests, "the declared endpoint got no connection"
    assert any(path.endswith("part-1.parquet") for _, path, _ in stub.requests)


@pytest.mark.parametrize(
    "uri, words",
    [
        ("ftp://host/logs/", ["unsupported URI scheme 'ftp'"]),
        ("http://127.0.0.1:9/logs/", ["unsupported URI scheme 'http'"]),
        ("s3://bucket/logs/?region=us-east-1&region=eu-west-1", ["'region' twice"]),
        ("s3://bucket/logs/?bogus=1", ["cannot open the URI", "bogus"]),
        ("s3://bucket/logs/#part", ["fragment"]),
        ("s3://bucket/logs/?region", ["KEY=VALUE"]),
        ("s3:///logs/", ["cannot open the URI"]),
    ],
)
def test_a_uri_that_cannot_be_honoured_is_one_line(uri, words, aws_environment):
    with pytest.raises(RecordError) as err:
        read_records(uri)
    message = str(err.value)
    assert "\n" not in message and message.startswith(uri), message
    assert all(w in message for w in words), message


def test_a_file_uri_with_a_query_is_refused_not_read_without_it(tmp_path):
    pq.write_table(log_table(), tmp_path / "log.parquet")
    assert read_records(tmp_path.as_uri() + "/").n_cases == N
    with pytest.raises(RecordError, match="takes no query string"):
        read_records(tmp_path.as_uri() + "/?endpoint_override=127.0.0.1:9")
    result = evaluate("ftp://host/logs/", out=tmp_path / "out")
    one_line(result, "ftp://host/logs/", "unsupported URI scheme 'ftp'")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 8. relative paths and <lake>


def test_receipts_of_relative_paths_verify(tmp_path):
    """`evaluate --input V/log.csv` and `compare` with relative arms, then `verify` from another folder."""
    folder = tmp_path / "V"
    folder.mkdir()
    pacsv.write_csv(log_table(), folder / "log.csv")
    pacsv.write_csv(log_table(), folder / "other.csv")
    assert evaluate("V/log.csv", out=Path("out"), cwd=tmp_path).returncode == 0
    verified = cli("verify", str(tmp_path / "out" / "receipt.json"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines()[-1] == "4 of 4 outputs identical"
    compared = cli(
        "compare",
        "--arm",
        "A=V/log.csv",
        "--arm",
        "B=V/other.csv",
        "--reps",
        "200",
        "--no-progress",
        "--output-dir",
        "cmp",
        cwd=tmp_path,
    )
    assert compared.returncode == 0, compared.stderr
    verified = cli("verify", "cmp/receipt.json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_producer_of_a_file_in_the_lake_names_the_lake_as_lake(tmp_path):
    """Two lakes of the same inputs in two folders: the same `producer` bytes (the lake's own folder is
    `<lake>`); a file outside the lake keeps its absolute path."""
    from assets.proposals import producers, with_producers
    from warehouse.lake import Lake

    rows = "mechanism,image_id,a_head\nm1,ISIC_1,a1\nm2,ISIC_1,a2\n"
    outside = tmp_path / "outside.csv"
    outside.write_text(rows)
    tables, named = [], []
    for where in ("one/lake", "two/deeper/lake"):
        root = tmp_path / where
        (root / "cohort").mkdir(parents=True)
        (root / "cohort" / "proposals.csv").write_text(rows)
        store = Lake(root)
        source = SimpleNamespace(
            is_reference=False, proposals_file=lambda root=root: str(root / "cohort/proposals.csv")
        )
        found = producers(store, source)
        assert found["m1"][0] == "file:<lake>/cohort/proposals.csv"
        tables.append(with_producers(pa.table({"mechanism": ["m1", "m2"]}), found))
        named.append(producers(store, SimpleNamespace(is_reference=False, proposals_file=lambda: str(outside))))
    sinks = [pa.BufferOutputStream() for _ in tables]
    for table, sink in zip(tables, sinks):
        pq.write_table(table, sink)
    assert sinks[0].getvalue().to_pybytes() == sinks[1].getvalue().to_pybytes()
    assert named[0]["m1"][0] == named[1]["m1"][0] == f"file:{outside.resolve()}"


# ---------------------------------------------------------------- 10, 21. folders and files


def test_a_folder_mixing_parquet_and_csv_is_refused_naming_the_folder(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    pq.write_table(log_table(), folder / "a.parquet")
    pacsv.write_csv(log_table(N), folder / "b.csv")
    with pytest.raises(RecordError, match="mixes Parquet and CSV files") as err:
        read_records(folder)
    assert err.value.source == str(folder) and "b.csv" in str(err.value)
    one_line(evaluate(str(folder), out=tmp_path / "out"), str(folder), "mixes Parquet and CSV")
    (folder / "a.parquet").unlink()  # CSV files only: one dataset (issue 28, section 3)
    assert read_records(folder).n_cases == N


def test_hidden_files_are_skipped_by_dataset_listing_and_landing(tmp_path):
    """A writer's `.part.parquet` (half written) and a `_temporary/` folder are not records, in a folder
    and under a glob; a writer's `.name.csv` in the landing folder is not landed."""
    from autheval.monitoring.landing import landed_files

    folder = tmp_path / "parts"
    (folder / "_temporary").mkdir(parents=True)
    pq.write_table(log_table(0), folder / "part-0.parquet")
    pq.write_table(log_table(0), folder / ".part-1.parquet")  # the same ids: read, it would be refused
    pq.write_table(log_table(0), folder / "_temporary" / "part-2.parquet")
    assert read_records(folder).n_cases == N
    assert read_records(str(folder / "*.parquet")).n_cases == N
    assert read_records(str(folder) + "/**parquet").n_cases == N
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "log.csv").write_text("case_id\nx\n")
    (landing / ".log.csv").write_text("case_id\nx\n")
    (landing / ".other.parquet").write_bytes(b"PAR1")
    assert [p.name for p in landed_files(landing)] == ["log.csv"]


def _listing_in_a_child(source: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """read_records in a fresh interpreter, so a listing that never ends fails the test instead of hanging it."""
    code = (
        "import sys\nfrom autheval.errors import RecordError\nfrom autheval.records.read import read_records\n"
        "try:\n    print(read_records(sys.argv[1]).n_cases)\n"
        "except RecordError as err:\n    print('refused:', err)\n"
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", code, source], cwd=ROOT, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"listing {source} ran past {timeout} s")


def test_a_symbolic_link_loop_is_refused_in_one_line(tmp_path):
    """`x -> .` inside a dataset folder: listed once, refused naming the link (it was listed forever, and
    with one file read it 41 times over)."""
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(), folder / "part-0.parquet")
    os.symlink(".", folder / "x")
    done = _listing_in_a_child(str(folder))
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip()
    assert line.startswith(f"refused: {folder / 'x'}: leads to a folder already listed"), line
    done = _listing_in_a_child(str(folder / "*.parquet"))
    assert done.stdout.strip().startswith("refused:") and "symbolic link loop" in done.stdout


def test_a_file_reached_twice_is_refused_and_a_link_to_another_file_is_read(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(0), folder / "part-0.parquet")
    elsewhere = tmp_path / "elsewhere.parquet"
    pq.write_table(log_table(N), elsewhere)
    os.symlink(elsewhere, folder / "part-1.parquet")
    assert read_records(folder).n_cases == 2 * N
    os.link(folder / "part-0.parquet", folder / "part-2.parquet")
    with pytest.raises(RecordError, match="is the same file as") as err:
        read_records(folder)
    assert err.value.source == str(folder / "part-2.parquet")
    (folder / "part-2.parquet").unlink()
    os.symlink(tmp_path / "gone.parquet", folder / "part-3.parquet")
    with pytest.raises(RecordError, match="a broken symbolic link"):
        read_records(folder)
    (folder / "part-3.parquet").unlink()
    os.mkfifo(folder / "part-4.parquet")  # opened, it would block the reader
    with pytest.raises(RecordError, match="not a regular file"):
        read_records(folder)


@pytest.mark.parametrize("name", ["a[1].parquet", "b*.parquet", "c?.parquet"])
def test_a_file_named_like_a_pattern_is_refused_never_read_as_another(tmp_path, name):
    """DuckDB takes `*`, `?` and `[` in the paths it is given as patterns: `a[1].parquet` read `a1.parquet`."""
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(0), folder / name)
    decoy = folder / (name.replace("[1]", "1").replace("*", "z").replace("?", "q"))
    pq.write_table(log_table(N, 3), decoy)
    with pytest.raises(RecordError, match="cannot be read as itself"):
        read_records(folder)
    with pytest.raises(RecordError, match="cannot be read as itself"):
        read_records(folder / name)
    csv_named = tmp_path / "x[1].csv"
    pacsv.write_csv(log_table(), csv_named)
    with pytest.raises(RecordError, match="cannot be read as itself"):
        read_records(csv_named)


def test_files_differing_only_in_nullability_are_one_dataset(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(0), folder / "part-0.parquet")
    second = log_table(N)
    strict = pa.schema([field.with_nullable(False) for field in second.schema])
    pq.write_table(second.cast(strict), folder / "part-1.parquet")
    assert not pq.read_schema(folder / "part-1.parquet").field("case_id").nullable
    assert read_records(folder).n_cases == 2 * N


@pytest.mark.parametrize(
    "change, column, words",
    [
        (
            lambda t: t.set_column(4, "utility_executed_local", t.column(4).cast(pa.string())),
            "utility_executed_local",
            "string here, double there",
        ),
        (
            lambda t: t.set_column(4, "utility_executed_local", t.column(4).cast(pa.float32())),
            "utility_executed_local",
            "float here, double there",
        ),
        (lambda t: t.set_column(1, "cluster_id", t.column(1).dictionary_encode()), "cluster_id", "dictionary"),
        (lambda t: t.drop_columns(["utility_proposed_local"]), "utility_proposed_local", "missing here"),
        (lambda t: t.select([1, 0, 2, 3, 4, 5]), "cluster_id", "another order"),
    ],
)
def test_files_with_other_column_types_are_refused_naming_the_column(tmp_path, change, column, words):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(0), folder / "part-0.parquet")
    pq.write_table(change(log_table(N)), folder / "part-1.parquet")
    with pytest.raises(RecordError, match="has other columns or types than") as err:
        read_records(folder)
    assert err.value.column == column and words in str(err.value), str(err.value)
    assert err.value.source == str(folder / "part-1.parquet")


def test_a_million_columns_are_refused_before_any_work(tmp_path):
    """A 1,000,000-column CSV header (it ran for 15 minutes at 2.5 GB), a 5,000-column one and a 5,000-column
    Parquet file: one line each, before a table, schema or reader is built from them."""
    wide = tmp_path / "wide.csv"
    names = ["case_id", "proposed_action", "executed_action", "utility_executed_local"]
    with open(wide, "w") as handle:
        handle.write(",".join(names + [f"x{i}" for i in range(1_000_000)]) + "\n")
        handle.write(",".join(["c1", "a1", "a1", "0"] + ["1"] * 1_000_000) + "\n")
    one_line(evaluate(str(wide), out=tmp_path / "out", timeout=60), str(wide), "header row is longer than")
    wider = tmp_path / "wider.csv"
    wider.write_text(",".join(names + [f"x{i}" for i in range(5000)]) + "\nc1,a1,a1,0" + ",1" * 5000 + "\n")
    with pytest.raises(RecordError, match="the header has 5,004 columns; a record has at most 4,096"):
        read_records(wider)
    table = log_table().append_column("x0", pa.array([1.0] * N))
    table = pa.table(
        {**{c: table.column(c) for c in table.column_names}, **{f"x{i}": pa.nulls(N) for i in range(5000)}}
    )
    pq.write_table(table, tmp_path / "wide.parquet")
    with pytest.raises(RecordError, match="columns; a record has at most 4,096"):
        read_records(tmp_path / "wide.parquet")
    from autheval.io import read_table

    with pytest.raises(RecordError, match="at most 4,096"):
        read_table(wider)


# ---------------------------------------------------------------- 13. outputs: duplicate names, decimals


def test_query_output_refuses_duplicate_names_and_keeps_every_decimal_digit():
    from autheval.reporting.tables import write_batches

    twice = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    for fmt in ("csv", "json", "table"):
        out = io.StringIO()
        with pytest.raises(ValueError, match="names the column 'a' twice"):
            write_batches([twice], fmt, out)
        assert out.getvalue() == ""  # nothing written before the refusal
    exact = Decimal("12345678901234567890.123456789")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([exact, None], pa.decimal128(38, 9)), pa.array([float("nan"), 0.1]), pa.array([[exact], []])],
        names=["d", "f", "l"],
    )
    out = io.StringIO()
    write_batches([batch], "json", out)
    text = out.getvalue()
    assert "12345678901234567890.123456789" in text
    rows = json.loads(text, parse_float=Decimal)
    assert rows[0]["d"] == exact and rows[0]["l"] == [exact] and rows[0]["f"] is None
    assert rows[1] == {"d": None, "f": Decimal("0.1"), "l": []}


def test_query_command_refuses_a_column_named_twice(tmp_path):
    from warehouse.catalog import publish_catalog
    from warehouse.lake import Lake

    lake = Lake(tmp_path / "lake")
    lake.write("estimates", pa.table({"metric": ["J"], "estimate": [0.5]}))
    publish_catalog(lake)
    result = cli("query", "select 1 as a, 2 as a", "--lake", str(lake.root), "--format", "csv")
    one_line(result, "'a' twice")
    assert result.stdout == ""
    result = cli(
        "query",
        "select 12345678901234567890.123456789::DECIMAL(38, 9) as d",
        "--lake",
        str(lake.root),
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout, parse_float=Decimal) == [{"d": Decimal("12345678901234567890.123456789")}]


def test_mavic_score_of_a_scored_file_writes_each_column_once(tmp_path):
    from tests.test_mavic import GOOD_ROWS, write_completions

    source = write_completions(tmp_path / "completions.parquet", GOOD_ROWS)
    first, second = tmp_path / "scored.parquet", tmp_path / "rescored.parquet"
    assert cli("mavic", "score", "--input", str(source), "--output", str(first)).returncode == 0
    done = cli("mavic", "score", "--input", str(first), "--output", str(second))
    assert done.returncode == 0, done.stderr
    once, twice = pq.read_table(first), pq.read_table(second)
    assert len(set(twice.column_names)) == len(twice.column_names), twice.column_names
    assert twice.column_names == once.column_names
    assert twice.drop_columns(["data_sha256"]).equals(once.drop_columns(["data_sha256"]))
    duplicated = tmp_path / "duplicated.csv"
    duplicated.write_text("group_id,group_id\ng1,g2\n")
    one_line(
        cli("mavic", "score", "--input", str(duplicated), "--output", str(tmp_path / "x.csv")),
        "'group_id'",
        "more than once",
    )


# ---------------------------------------------------------------- 20. receipts


@pytest.fixture
def receipt(tmp_path) -> dict:
    from autheval.reporting.receipt import build_receipt

    return build_receipt(
        "evaluate",
        ["evaluate", "--input", str(tmp_path / "log.csv")],
        [{"role": "--input", "path": str(tmp_path / "log.csv"), "sha256": "a" * 64}],
        [{"name": "summary.json", "sha256": "b" * 64}, {"name": "table:x", "sha256": "c" * 64, "rows": 3}],
        {"scheme": "evaluator"},
    )


def _break(receipt: dict, change) -> dict:
    broken = json.loads(json.dumps(receipt))
    change(broken)
    return broken


@pytest.mark.parametrize(
    "change, column, words",
    [
        (lambda r: r["inputs"][0].pop("path"), "inputs[0].path", "an entry names this key"),
        (lambda r: r["outputs"][0].pop("name"), "outputs[0].name", "an entry names this key"),
        (lambda r: r.update(inputs="log.csv"), "inputs", "must be a list"),
        (lambda r: r.update(outputs={"name": "x"}), "outputs", "must be a list"),
        (lambda r: r["inputs"].__setitem__(0, "log.csv"), "inputs[0]", "must be an object"),
        (lambda r: r["inputs"][0].update(path=7), "inputs[0].path", "must be non-empty text"),
        (lambda r: r["inputs"][0].update(path="log.csv"), "inputs[0].path", "absolute path or a URI"),
        (lambda r: r["inputs"][0].update(sha256="xyz"), "inputs[0].sha256", "64 lowercase hex"),
        (lambda r: r["inputs"][0].update(extra=1), "inputs[0].extra", "unknown key"),
        (lambda r: r["outputs"][1].update(rows=-1), "outputs[1].rows", "must be a count"),
        (lambda r: r["outputs"][1].update(rows=True), "outputs[1].rows", "must be a count"),
        (lambda r: r["outputs"].append(dict(r["outputs"][0])), "outputs[2].name", "named twice"),
        (lambda r: r.update(receipt_version=True), "receipt_version", "whole number"),
        (lambda r: r.update(command=["evaluate"]), "command", "must be text"),
        (lambda r: r.update(config=[1]), "config", "must be an object"),
        (lambda r: r.update(software={"numpy": 2}), "software.numpy", "version text"),
        (lambda r: r.update(software=[]), "software", "must be an object"),
        (lambda r: r.update(surprise=1), "surprise", "unknown key"),
    ],
)
def test_every_field_of_a_receipt_is_checked(receipt, tmp_path, change, column, words):
    from autheval.reporting.receipt import read_receipt

    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(_break(receipt, change)))
    with pytest.raises(RecordError) as err:
        read_receipt(path)
    assert err.value.column == column and words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_bad_receipt_is_one_line_and_exit_2(receipt, tmp_path):
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(_break(receipt, lambda r: r["inputs"][0].pop("path"))))
    one_line(cli("verify", str(path)), "key 'inputs[0].path'")
    path.write_text(json.dumps(_break(receipt, lambda r: r.update(inputs="log.csv"))))
    one_line(cli("verify", str(path)), "key 'inputs'")
    path.write_text('{"config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line(cli("verify", str(path)), str(path), "deeper")


@pytest.fixture
def parts(tmp_path) -> Path:
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(log_table(0), folder / "part-0.parquet")
    pq.write_table(log_table(N), folder / "part-1.parquet")
    return folder


def test_a_glob_input_whose_files_are_gone_is_a_changed_input(parts, tmp_path):
    out = tmp_path / "out"
    assert evaluate(str(parts / "*.parquet"), out=out).returncode == 0
    shutil.rmtree(parts)
    parts.mkdir()
    verified = cli("verify", str(out / "receipt.json"))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    lines = verified.stdout.splitlines()
    assert (
        lines[0]
        == f"input changed: {parts / '*.parquet'} (recorded {lines[0].split('recorded ')[1][:12]}, now missing)"
    )
    assert lines[-1].endswith("; NOT VERIFIED")


def test_verify_names_outputs_the_receipt_lacks_and_outputs_the_rerun_lacks(parts, tmp_path):
    out = tmp_path / "out"
    assert evaluate(str(parts), out=out).returncode == 0
    path = out / "receipt.json"
    recorded = json.loads(path.read_text())
    assert [o["name"] for o in recorded["outputs"]][-1] == "summary.md"
    recorded["outputs"] = recorded["outputs"][:-1]  # the re-run writes summary.md too
    path.write_text(json.dumps(recorded))
    verified = cli("verify", str(path))
    assert verified.returncode == 1, verified.stdout
    assert "new        summary.md (not in the receipt)" in verified.stdout.splitlines()
    assert verified.stdout.splitlines()[-1] == "3 of 4 outputs identical; NOT VERIFIED"
    recorded["outputs"].append({"name": "extra.csv", "sha256": "0" * 64})
    path.write_text(json.dumps(recorded))
    verified = cli("verify", str(path))
    assert verified.returncode == 1
    assert "missing    extra.csv (the re-run did not write it)" in verified.stdout.splitlines()
