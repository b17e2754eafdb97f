"""The lake's estimate assets read the `records` table where it lies: DuckDB scans the table's Parquet
files (a view, grouped per analysis in SQL), and this process never reads the table whole."""

from __future__ import annotations

import pyarrow as pa
from dagster import DagsterInstance, materialize

from dagster_project.definitions import build_definitions, study_assets
from dagster_project.demo import QUIET
from tests.test_assets import mechanism_records
from warehouse.lake import Lake

ESTIMATE_TABLES = ["estimates", "contrasts", "intervals"]


def run_estimates(lake: Lake):
    return materialize(
        study_assets(),
        selection=ESTIMATE_TABLES,
        resources=build_definitions(str(lake.root)).resources,
        instance=DagsterInstance.ephemeral(),
        run_config=QUIET,
        raise_on_error=False,
    )


def test_the_estimate_assets_never_read_the_records_table_whole(tmp_path, monkeypatch):
    held, scanned = Lake(tmp_path / "held"), Lake(tmp_path / "scanned")
    for lake in (held, scanned):
        lake.write("records", mechanism_records())
    records = held.read("records")
    assert run_estimates(held).success  # the reference run: the same rows, before the refusal

    read = Lake.read

    def refuse_records(self, name):
        if name == "records":
            raise AssertionError("the records table was read whole into this process")
        return read(self, name)

    monkeypatch.setattr(Lake, "read", refuse_records)
    result = run_estimates(scanned)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    monkeypatch.setattr(Lake, "read", read)
    assert len(set(records.column("analysis").to_pylist())) > 1  # several analyses grouped from one scan
    for name in ESTIMATE_TABLES:
        assert scanned.read(name).equals(held.read(name)), name  # the same rows, bit for bit


def test_an_analysis_scanned_where_it_lies_is_the_analysis_held(tmp_path):
    """lake_analysis_records over the table's files gives what recordsets_by gives over the rows held:
    the same counts, record level and data hash (the Arrow IPC bytes, hashed as DuckDB streams them)."""
    from autheval.records.datasets import scan_parquet_files
    from autheval.records.read import lake_analysis_records
    from autheval.records.recordsets import recordsets_by
    from warehouse.sql import connect

    lake = Lake(tmp_path / "lake")
    lake.write("records", mechanism_records())
    held_con, scanned_con = connect(), connect()
    held_con.register("records", lake.read("records"))
    files = lake.table_files("records")
    scan_parquet_files(scanned_con, "records", files)
    for analysis in ("CLIP probe", "LLaVA-Med head"):
        [held] = recordsets_by(held_con, "records", "records/records_of_analysis", [(analysis, {"analysis": analysis})])
        scanned = lake_analysis_records(scanned_con, files, analysis, f"lake:records/{analysis}")
        assert scanned.rows is None and scanned.dataset.files == tuple(files)
        fields = (
            "source",
            "level",
            "has_local",
            "has_global",
            "n_cases",
            "n_clusters",
            "n_changed",
            "n_local",
            "data_sha256",
        )
        assert [getattr(scanned, f) for f in fields] == [getattr(held, f) for f in fields]
        rows, held_rows = scanned.table, held.table  # the canonical rows, row numbers (case_id order) included
        assert rows.column("analysis").to_pylist() == held_rows.column("analysis").to_pylist()
        assert rows.drop_columns(["analysis"]).equals(held_rows.drop_columns(["analysis"]))


def test_a_broken_rule_in_a_lake_analysis_is_named_as_in_the_rows_held(tmp_path):
    """A non-finite utility in one analysis of the lake's records: the same one line (file, column,
    rule, row in case_id order, id, value) whether the rows are held or scanned where they lie."""
    import pytest

    from autheval.errors import RecordError
    from autheval.records.datasets import scan_parquet_files
    from autheval.records.read import lake_analysis_records
    from autheval.records.recordsets import recordsets_by
    from warehouse.sql import connect

    rows = mechanism_records().to_pylist()
    broken = sorted((r for r in rows if r["analysis"] == "CLIP probe"), key=lambda r: r["case_id"])[5]
    broken["utility_executed_local"] = float("inf")
    lake = Lake(tmp_path / "lake")
    lake.write("records", pa.Table.from_pylist(rows))
    held_con, scanned_con = connect(), connect()
    held_con.register("records", lake.read("records"))
    scan_parquet_files(scanned_con, "records", lake.table_files("records"))
    with pytest.raises(RecordError) as held:
        recordsets_by(held_con, "records", "records/records_of_analysis", [("CLIP probe", {"analysis": "CLIP probe"})])
    with pytest.raises(RecordError) as scanned:
        lake_analysis_records(scanned_con, lake.table_files("records"), "CLIP probe", "lake:records/CLIP probe")
    assert str(scanned.value) == str(held.value)
    assert "utility_executed_local" in str(scanned.value) and "(row 6, id 'img005'" in str(scanned.value)
    lake_analysis_records(scanned_con, lake.table_files("records"), "LLaVA-Med head", "lake:records/LLaVA-Med head")
