"""The lake and catalog: atomic writes, views over Parquet, read-only queries."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse.atomic import atomic_path
from warehouse.catalog import connect_readonly, publish_catalog, query
from warehouse.lake import Lake
from warehouse.sql import load_sql, quote_identifier


def test_atomic_path_keeps_the_old_file_when_the_block_fails(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_lake_tables_metadata_and_catalog(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write("estimates", pa.table({"x": [1.0, 2.0]}), metadata={"scheme": "reference"})
    lake.write_partition("records", "2026-01", pa.table({"case_id": ["a"]}))
    lake.write_partition("records", "2026-02", pa.table({"case_id": ["b"]}))
    assert pq.read_schema(lake.table_path("estimates")).metadata[b"scheme"] == b"reference"
    publish_catalog(lake)
    assert query(lake, "select sum(x) as s from estimates").to_pylist() == [{"s": 3.0}]
    assert query(lake, "select count(*) as n from records").to_pylist() == [{"n": 2}]
    # folders that merely hold Parquet files (a landing folder, reports) are not tables
    (lake.root / "landing").mkdir()
    pq.write_table(pa.table({"x": [1]}), lake.root / "landing" / "waiting.parquet")
    assert set(lake.tables()) == {"estimates", "records"}


def test_catalog_is_read_only_for_readers(tmp_path):
    lake = Lake(tmp_path)
    lake.write("t", pa.table({"x": [1]}))
    publish_catalog(lake)
    con = connect_readonly(lake)
    with pytest.raises(duckdb.Error):
        con.execute("create table y as select 1")
    # a reader holding the catalog does not stop a publish (the file is replaced, not written)
    lake.write("u", pa.table({"y": [2]}))
    publish_catalog(lake)
    assert con.execute("select count(*) from t").fetchone() == (1,)
    con.close()
    assert query(lake, "select y from u").to_pylist() == [{"y": 2}]


def test_names_are_checked():
    with pytest.raises(ValueError):
        Lake("x").table_path("Robert'); drop table")
    with pytest.raises(ValueError):
        quote_identifier("a b")
    with pytest.raises(ValueError):
        load_sql("../secrets")
