"""The monitor in bounded time and memory (issue 30): the period moments of every ratio from one window
over each cluster's periods (checked against the long form it replaced, tests/sql/), no slice's
records held once validated, and the lake's landed partitions read where they lie (landed_view)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import autheval.monitoring.monitor as monitor
from autheval.monitoring.landing import landed_view, with_deployment_columns
from autheval.monitoring.protocol import parse_protocol
from autheval.records.datasets import stored_files
from tests.sql import sql_text
from tests.test_monitor_statistics import PROTOCOL, land, log
from warehouse.filesystem import LakeLocation
from warehouse.sql import connect, load_sql


@pytest.fixture(scope="module")
def landed(tmp_path_factory) -> pa.Table:
    """Two sites, four months, lesions seen again in later months (their sums grow), one site's
    utilities far from 0 (the centring matters), a missing proposal score on unchanged cases."""
    rng = np.random.default_rng(30)
    tables = []
    for month in range(1, 5):
        for site, utility in (("A", 0.0), ("B", 1e4)):
            table = log(site, month, 25, rng, prefix=f"{site}-lesion", utility=utility)
            if month == 3 and site == "A":  # unchanged cases without the proposal's own score
                same = pa.compute.equal(table["proposed_action"], table["executed_action"])
                table = table.set_column(
                    5, "utility_proposed_local", pa.compute.if_else(same, None, table["utility_proposed_local"])
                )
            tables.append(table)
    return land(tables, tmp_path_factory.mktemp("landed"))


def _moments(landed: pa.Table, text: str) -> list[dict]:
    con = connect(threads=1)
    con.register("landed_records", with_deployment_columns(landed))
    monitor.register_slices(con, monitor.look_slices(con))
    con.sql(load_sql("recurring/monitor_cluster_periods")).create_view("monitor_cluster_periods")
    return con.execute(text).arrow().read_all().to_pylist()


def test_the_period_moments_equal_the_long_form(landed):
    """Every slice, ratio and period: the same rows, each number to 1e-12 of its size."""
    got = _moments(landed, load_sql("recurring/monitor_period_moments"))
    want = _moments(landed, sql_text("monitor_period_moments_long"))
    assert len(got) == len(want) > 0
    assert {r["period"] for r in got} == {r["period"] for r in want} and len({r["period"] for r in got}) == 4
    for g, w in zip(got, want):
        assert [g[k] for k in ("slice", "unit", "metric", "period")] == [
            w[k] for k in ("slice", "unit", "metric", "period")
        ]
        for k in ("k", "d_y", "d_x", "d_ee", "d_xe", "d_xx"):
            if w[k] is None:
                assert g[k] is None, (k, w)
            else:
                assert g[k] == pytest.approx(w[k], rel=1e-12, abs=1e-12 * max(1.0, abs(w["k"]))), (k, w, g)


def test_a_validated_slice_holds_no_rows(landed, monkeypatch):
    """Each slice's records are validated whole, then only their level and counts are kept (the rows of
    every slice held to the end were most of the monitor's memory)."""
    seen = []
    decide = monitor.decide_looks

    def spy(con, stats, protocol):
        seen.append(stats)
        return decide(con, stats, protocol)

    monkeypatch.setattr(monitor, "decide_looks", spy)
    result = monitor.monitor_table(landed, parse_protocol(PROTOCOL), reps=0)
    assert result.table.num_rows > 0 and seen and seen[0].whole
    assert all(records.rows is None for records in seen[0].whole.values())


OLD_COLUMNS = ["site", "model_version", "risk_stratum", "proposed_local_given", "supersedes"]


@pytest.mark.parametrize("store", ["local", "object store", "held"])
def test_the_monitor_reads_the_landed_files_where_they_lie_as_the_rows_held(landed, tmp_path, store):
    """The lake's landed partitions as files (landed_view: read by each query, never held; an object
    store's through the lake's filesystem seam, here a local folder named as one; few rows in all read
    once into a DuckDB table, `held`): a partition
    landed before logs carried the deployment columns counts as site and model version 'unspecified'
    with the proposal's local score taken as given where it is there, and a superseded partition's rows
    are left out, as the same rows held and prepared one partition at a time give it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    keys = sorted(set(landed.column("landed_key").to_pylist()))
    parts = {key: landed.filter(pc.equal(landed["landed_key"], key)) for key in keys}
    # landed before the columns existed: the partition whose log left out the proposal's score on unchanged
    # cases, that score then missing from its rows (the column that says so did not exist)
    old = next(key for key in keys if not pc.all(parts[key]["proposed_local_given"]).as_py())
    replaced = next(key for key in keys if key != old)
    given = parts[old]["proposed_local_given"]
    local = pc.if_else(given, parts[old]["utility_proposed_local"], pa.scalar(None, pa.float64()))
    parts[old] = parts[old].set_column(
        parts[old].schema.get_field_index("utility_proposed_local"), "utility_proposed_local", local
    )
    parts[old] = parts[old].drop_columns(OLD_COLUMNS)
    successor = parts[replaced]  # its correction: other utilities, declaring what it supersedes
    successor = successor.set_column(
        successor.schema.get_field_index("utility_executed_local"),
        "utility_executed_local",
        pc.add(successor["utility_executed_local"], 0.25),
    )
    successor = successor.set_column(
        successor.schema.get_field_index("landed_key"), "landed_key", pa.array(["f" * 20] * successor.num_rows)
    )
    successor = successor.set_column(
        successor.schema.get_field_index("supersedes"), "supersedes", pa.array([replaced] * successor.num_rows)
    )
    parts["f" * 20] = successor
    files = []
    for number, (_key, part) in enumerate(sorted(parts.items())):
        files.append(str(tmp_path / f"{number}.parquet"))
        pq.write_table(part, files[-1])
    scheme = "file" if store == "local" else "teststore"
    files = stored_files(LakeLocation(pafs.LocalFileSystem(), str(tmp_path), scheme), files)
    files = dataclasses.replace(files, rows=0 if store == "held" else None)
    held = pa.concat_tables(
        [with_deployment_columns(part) for key, part in sorted(parts.items()) if key != replaced],
        promote_options="permissive",
    )
    protocol = parse_protocol(PROTOCOL)
    from_files = monitor.monitor_table(files, protocol, reps=0)
    from_rows = monitor.monitor_table(held, protocol, reps=0)
    assert from_files.table.num_rows > 0 and from_files.table.equals(from_rows.table)
    assert from_files.case_mix.equals(from_rows.case_mix)
    assert "unspecified" in set(from_files.table.column("site").to_pylist())
    con = connect(threads=1)
    landed_view(con, files)
    [(tables,)] = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'landed_source'").fetchall()
    assert tables == (store == "held")  # few rows: read once, held by DuckDB; else read where they lie
    [(n_replaced,)] = con.execute("SELECT count(*) FROM landed_records WHERE landed_key = ?", [replaced]).fetchall()
    assert n_replaced == 0
    old_rows = con.execute(
        "SELECT site, model_version, risk_stratum, proposed_local_given, utility_proposed_local IS NOT NULL "
        "FROM landed_records WHERE landed_key = ?",
        [old],
    ).fetchall()
    assert old_rows and all(r[:3] == ("unspecified", "unspecified", None) and r[3] is r[4] for r in old_rows)
    assert {r[3] for r in old_rows} == {True, False}  # both kinds of row are there


def test_a_landed_partition_gone_from_the_lake_is_named_before_the_files_are_scanned(landed, tmp_path):
    """Read where they lie, the landed partitions are checked as the lake's own read checks them: a
    committed file gone is one line naming it and the way back, not the scanner's error."""
    import pyarrow.compute as pc

    from autheval.monitoring.landing import LANDED_TABLE, landed_table_files
    from warehouse.lake import Lake
    from warehouse.snapshots import SnapshotError

    lake = Lake(tmp_path / "lake")
    for key in sorted(set(landed.column("landed_key").to_pylist()))[:2]:
        lake.write_partition(LANDED_TABLE, key, landed.filter(pc.equal(landed["landed_key"], key)))
    assert len(landed_table_files(lake)) == 2
    gone = lake.table_files(LANDED_TABLE)[0]
    Path(gone).unlink()
    with pytest.raises(SnapshotError, match=f"{gone}: a file of snapshot .* is missing .*autheval lake recover"):
        landed_table_files(lake)
    key = sorted(set(landed.column("landed_key").to_pylist()))[2]
    with pytest.raises(SnapshotError, match=f"{gone}: a file of table 'landed_records' is missing"):
        with lake.open_run():  # while a run has the table staged: the file gone is still named (the run fails)
            lake.write_partition(LANDED_TABLE, key, landed.filter(pc.equal(landed["landed_key"], key)))
            landed_table_files(lake)


def test_a_damaged_landed_partition_is_named_in_one_line(landed, tmp_path):
    """A partition whose Parquet footer is damaged: one line naming it (the scanner's own error named no
    file, or cut its path short)."""
    import pyarrow.compute as pc

    from autheval.monitoring.landing import LANDED_TABLE, landed_table_files
    from warehouse.lake import Lake
    from warehouse.snapshots import SnapshotError

    lake = Lake(tmp_path / "lake")
    for key in sorted(set(landed.column("landed_key").to_pylist()))[:2]:
        lake.write_partition(LANDED_TABLE, key, landed.filter(pc.equal(landed["landed_key"], key)))
    assert landed_table_files(lake).rows == sum(
        landed.filter(pc.equal(landed["landed_key"], key)).num_rows
        for key in sorted(set(landed.column("landed_key").to_pylist()))[:2]
    )
    damaged = Path(lake.table_files(LANDED_TABLE)[1])
    data = bytearray(damaged.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[len(data) - 8 - footer : len(data) - 4 - footer] = b"\xff" * 4
    damaged.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=f"^{damaged}: a landed partition cannot be read as Parquet: "):
        landed_table_files(lake)


def test_the_fixed_sample_interval_resamples_one_look_at_a_time(landed, monkeypatch):
    """Each look's records are held and resampled on their own (every look at once held each slice's
    records to date once per look: 2.7 GB for 100k landed records), and a look's interval is what that
    look alone gives."""
    calls = []
    estimate = monitor.estimate

    def spy(recordsets, **kwargs):
        calls.append([r.analysis for r in recordsets])
        return estimate(recordsets, **kwargs)

    monkeypatch.setattr(monitor, "estimate", spy)
    table = monitor.monitor_table(landed, parse_protocol(PROTOCOL), reps=50).table
    assert len(calls) > 4 and all(len(analyses) == 1 for analyses in calls)
    assert len({a for analyses in calls for a in analyses}) == len(calls)
    assert sum(v is not None for v in table.column("ci_lower").to_pylist()) > 0


def test_a_landing_checks_and_orders_the_landed_files_without_holding_them(landed, tmp_path, monkeypatch):
    """A new file's cases are checked against the landed partitions read where they lie (a 10^7-record
    lake held 2.2 GB for each landing), and the re-derivation order (a correction after the file it
    supersedes) is read from their keys: with every read of the landed table into memory refused, a
    case landed twice is still refused, a declared correction still passes, and the order holds."""
    import pyarrow.compute as pc

    import autheval.monitoring.landing as landing
    from autheval.errors import RecordError
    from warehouse.lake import Lake

    lake = Lake(tmp_path / "lake")
    keys = sorted(set(landed.column("landed_key").to_pylist()))[:2]
    parts = {key: landed.filter(pc.equal(landed["landed_key"], key)) for key in keys}
    later, earlier = keys  # the correction sorts first by its key: only what it supersedes orders it after
    correction = parts[later].set_column(
        parts[later].schema.get_field_index("supersedes"), "supersedes", pa.array([earlier] * parts[later].num_rows)
    )
    for key, part in ((earlier, parts[earlier]), (later, correction)):
        lake.write_partition(landing.LANDED_TABLE, key, part)
    folder = tmp_path / "landing" / landing.PROCESSED
    folder.mkdir(parents=True)
    for key in keys:
        (folder / landing.stored_name(key, "log.csv")).write_text("")

    def refused(*args, **kwargs):
        raise AssertionError("the landed table was read into memory")

    lake_read = Lake.read
    monkeypatch.setattr(landing, "read_landed_table", refused)
    monkeypatch.setattr(
        Lake, "read", lambda self, name: refused() if name == landing.LANDED_TABLE else lake_read(self, name)
    )
    again = parts[later].set_column(
        parts[later].schema.get_field_index("landed_key"), "landed_key", pa.array(["c" * 20] * parts[later].num_rows)
    )
    with pytest.raises(RecordError, match=r"case_id.*already landed \(site, period, case_id\)"):
        landing.check_landing(lake, again, "again.csv")
    declared = again.set_column(
        again.schema.get_field_index("supersedes"), "supersedes", pa.array([later] * again.num_rows)
    )
    landing.check_landing(lake, declared, "declared.csv")  # a correction of the file that counts: lands
    with pytest.raises(RecordError, match="already superseded by"):
        landing.check_landing(
            lake,
            declared.set_column(
                declared.schema.get_field_index("supersedes"), "supersedes", pa.array([earlier] * again.num_rows)
            ),
            "twice.csv",
        )
    assert [p.name[:20] for p in landing.landed_sources(lake, tmp_path / "landing")] == [earlier, later]
