"""The monitor in bounded time and memory (issue 30): the period moments of every ratio from one window
over each cluster's periods (checked against the long form it replaced, tests/sql/), and no slice's
records held once validated."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import autheval.monitoring.monitor as monitor
from autheval.monitoring.landing import with_deployment_columns
from autheval.monitoring.protocol import parse_protocol
from tests.sql import sql_text
from tests.test_monitor_statistics import PROTOCOL, land, log
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
