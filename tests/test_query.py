"""`autheval query` and the catalog: one read-only statement enforced by DuckDB, file access limited to
the lake, streamed results, valid JSON, a lake that can be copied or moved, files that respect the umask."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest

from tests.conftest import ROOT, run_cli
from warehouse.catalog import QueryRefused, catalog_path, connect_readonly, publish_catalog, query
from warehouse.lake import Lake


@pytest.fixture
def lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write("estimates", pa.table({"metric": ["J", "p", "x"], "estimate": [0.5, float("nan"), float("inf")]}))
    lake.write_partition("landed_records", "a1", pa.table({"case_id": ["a"]}))
    lake.write_partition("landed_records", "b2", pa.table({"case_id": ["b"]}))
    publish_catalog(lake)
    return lake


def _query(lake: Lake, sql: str, *flags: str) -> subprocess.CompletedProcess:
    return run_cli("query", sql, "--lake", str(lake.root), *flags)


def _refused(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autheval: error: query: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("sql", [
    "COPY (select 1 as x) TO '{lake}/estimates.parquet' (format parquet)",
    "COPY (select 1 as x) TO '{lake}/autheval.duckdb' (format csv)",
    "EXPORT DATABASE '{lake}/export'",
    "SET threads = 1",
    "RESET threads",
    "PRAGMA threads = 1",
    "LOAD httpfs",
    "INSTALL httpfs",
    "CREATE TEMP TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "ATTACH '{lake}/other.duckdb' AS other",
    "SET VARIABLE autheval_lake = '/'",
    "CALL pragma_version()",
    "CHECKPOINT",
    "select 1; select 2",
    "select 1; COPY (select 1) TO '{lake}/estimates.parquet'",
])
def test_statements_that_write_or_configure_are_refused_and_the_lake_is_untouched(lake, sql):
    before = {p: p.read_bytes() for p in lake.root.rglob("*") if p.is_file()}
    _refused(_query(lake, sql.format(lake=lake.root)))
    after = {p: p.read_bytes() for p in lake.root.rglob("*") if p.is_file()}
    assert after == before


def test_files_outside_the_lake_cannot_be_read(lake, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the query")
    for sql in (f"select * from read_text('{secret}')",
                f"select * from read_text('{lake.root}/../secret.txt')",
                "select * from read_text('/etc/passwd')",
                "select * from glob('/etc/*')"):
        line = _refused(_query(lake, sql))
        assert "limited to the lake" in line and "not for the query" not in line


def test_read_only_statements_are_allowed(lake):
    assert _query(lake, "select metric from estimates order by metric", "--format", "csv").stdout == "metric\nJ\np\nx\n"
    assert _query(lake, "with t as (select count(*) as n from landed_records) select n from t",
                  "--format", "csv").stdout == "n\n2\n"
    assert "estimate" in _query(lake, "describe estimates").stdout
    assert "landed_records" in _query(lake, "show tables").stdout
    # files inside the lake may be read directly
    inside = _query(lake, f"select count(*) as n from read_parquet('{lake.root}/estimates.parquet')", "--format", "csv")
    assert inside.stdout == "n\n3\n"


@pytest.mark.parametrize("sql", ["", "   ", " ; ", "-- only a comment"])
def test_an_empty_query_is_one_line_error(lake, sql):
    assert "empty" in _refused(_query(lake, sql))


def test_a_bad_query_is_one_line(lake):
    assert "nonexistent" in _refused(_query(lake, "select * from nonexistent"))


def test_json_is_valid_with_non_finite_numbers_as_null(lake):
    result = _query(lake, "select metric, estimate, [estimate, 1.0] as pair, 0.5 * 3 as d from estimates order by metric",
                    "--format", "json")
    assert result.returncode == 0, result.stderr

    def no_constants(token):
        raise AssertionError(f"invalid JSON token {token}")

    rows = json.loads(result.stdout, parse_constant=no_constants)
    assert rows == [{"metric": "J", "estimate": 0.5, "pair": [0.5, 1.0], "d": 1.5},
                    {"metric": "p", "estimate": None, "pair": [None, 1.0], "d": 1.5},
                    {"metric": "x", "estimate": None, "pair": [None, 1.0], "d": 1.5}]
    empty = _query(lake, "select * from estimates where false", "--format", "json")
    assert json.loads(empty.stdout) == []


def _peak_rss_kb(pid: int) -> int:
    """The process's own high-water RSS (VmHWM of its address space since exec; ru_maxrss would also
    count the pre-exec copy of a large forking parent)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def test_results_stream_in_bounded_memory(lake):
    """Two million rows go through in batches: the process stays far below what holding them takes."""
    command = [sys.executable, "-m", "autheval", "query", "select range as x from range(2000000)",
               "--lake", str(lake.root), "--format", "csv"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines, peak = 0, 0
    for _ in proc.stdout:
        lines += 1
        if lines == 1_900_000:  # still writing (far more than a pipe buffer to go): measure it now
            peak = _peak_rss_kb(proc.pid)
    assert proc.wait() == 0
    assert lines == 2_000_001
    assert 0 < peak < 350 * 1024, f"peak RSS {peak / 1024:.0f} MB"


def test_a_closed_pipe_ends_quietly(lake):
    command = [sys.executable, "-m", "autheval", "query", "select * from range(1000000)", "--lake", str(lake.root)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"range"
    proc.stdout.close()  # as `| head -1` does
    stderr = proc.stderr.read()
    assert proc.wait() == 0
    assert stderr == b""


def test_the_catalog_names_no_absolute_path(lake):
    con = connect_readonly(lake)
    try:
        definitions = [row[0] for row in con.execute("select sql from duckdb_views() where not internal").fetchall()]
    finally:
        con.close()
    assert len(definitions) == 2
    assert not any(str(lake.root) in sql for sql in definitions), definitions


def test_a_copied_lake_serves_its_own_data(lake, tmp_path):
    copy = Lake(tmp_path / "copy")
    shutil.copytree(lake.root, copy.root)
    copy.write("estimates", pa.table({"metric": ["copied"], "estimate": [1.0]}))
    assert query(copy, "select metric from estimates").to_pylist() == [{"metric": "copied"}]
    assert query(lake, "select count(*) as n from estimates").to_pylist() == [{"n": 3}]


def test_a_moved_lake_still_works(lake, tmp_path):
    moved = Lake(tmp_path / "elsewhere" / "moved")
    moved.root.parent.mkdir()
    os.rename(lake.root, moved.root)
    assert query(moved, "select count(*) as n from landed_records").to_pylist() == [{"n": 2}]
    result = run_cli("query", "select count(*) as n from estimates", "--lake", str(moved.root), "--format", "csv")
    assert result.stdout == "n\n3\n", result.stderr


def test_query_refuses_in_the_library_too(lake):
    with pytest.raises(QueryRefused, match="COPY"):
        query(lake, f"COPY (select 1) TO '{lake.root}/x.csv'")
    con = connect_readonly(lake)
    try:
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_lake_files_respect_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        lake = Lake(tmp_path / "lake")
        path = lake.write("t", pa.table({"x": [1]}))
        publish_catalog(lake)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode
    assert catalog_path(lake).stat().st_mode & 0o777 == mode

