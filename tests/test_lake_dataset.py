"""The lake's estimate assets read the `records` table where it lies: DuckDB scans the table's Parquet
files (a view, grouped per analysis in SQL), and this process never reads the table whole."""

from __future__ import annotations

from dagster import DagsterInstance, materialize

from dagster_project.definitions import build_definitions, study_assets
from dagster_project.demo import QUIET
from tests.test_assets import mechanism_records
from warehouse.lake import Lake

ESTIMATE_TABLES = ["estimates", "contrasts", "intervals"]


def run_estimates(lake: Lake):
    return materialize(study_assets(), selection=ESTIMATE_TABLES, resources=build_definitions(str(lake.root)).resources,
                       instance=DagsterInstance.ephemeral(), run_config=QUIET, raise_on_error=False)


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
