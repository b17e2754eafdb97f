"""The picture shows where the alert is (issue 28, item 2.2): reports/trend.png has a panel per site x model
version x rule the monitor watches, each look's status marked, at most MAX_PLOT_WIDTH_PX wide (panels wrap
into rows); the report's Trend section names the site and model version of every row, once."""

from __future__ import annotations

import html
import io
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from PIL import Image

from autheval.reporting.report.plots import (
    MAX_PANEL_ROWS,
    MAX_PLOT_WIDTH_PX,
    MONITOR_DPI,
    MONITOR_PANEL_INCHES,
    monitor_panels,
    monitor_plot_png,
    monitor_plot_rows,
    trend_plot_png,
)
from autheval.reporting.report.words import SECTION_TITLES
from tests.conftest import land_and_monitor

RED = (0xD6, 0x27, 0x28)  # an alerting look and its panel's frame


def png_size(png: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(png)).size


def red_pixels(png: bytes) -> int:
    import numpy as np

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    return int((np.abs(pixels - np.array(RED)).max(axis=2) <= 12).sum())


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def html_section(page: str, title: str) -> str:
    return page.split(f"<h2>{html.escape(title)}</h2>", 1)[1].split("<h2>", 1)[0]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A simulated deployment as `autheval synth deployment --sites 3 --months 4 --drift
    site-3:proposer_quality:-1.0:from=2:version=v2-rc` writes it, landed and monitored by `autheval monitor
    run` (the only alert of a site's own version: site-3 on v2-rc), then the report asset."""
    from assets.reports import report
    from assets.resources import LakeResource
    from autheval.monitoring.deployment_sim import DeploymentModel

    model = DeploymentModel(sites=3, months=4, clusters_per_month=60)
    lake, code = land_and_monitor(
        tmp_path_factory.mktemp("trend"), model, "site-3:proposer_quality:-1.0:from=2:version=v2-rc"
    )
    assert code == 3  # something alerts
    report(LakeResource(root=str(lake)))
    return lake


def tables(lake) -> tuple[pa.Table, pa.Table]:
    from warehouse.lake import Lake

    store = Lake(lake)
    return store.read("monitor"), store.read("trend")


def test_the_planted_alert_is_site_3_on_v2_rc(lake):
    monitor, _ = tables(lake)
    alerting = {(r["site"], r["model_version"]) for r in monitor.to_pylist() if r["status"] == "alert"}
    assert ("site-3", "v2-rc") in alerting and alerting <= {("site-3", "v2-rc"), ("site-3", "all"), ("all", "all")}


def test_trend_png_has_a_panel_per_watched_site_and_version_and_rule_within_the_width_cap(lake):
    monitor, _ = tables(lake)
    png = (lake / "reports" / "trend.png").read_bytes()
    width, height = png_size(png)
    watched = {(r["site"], r["model_version"], r["mechanism"]) for r in monitor.to_pylist()}
    rules = {(r["metric"], r["unit"]) for r in monitor.to_pylist()}
    assert ("site-3", "v2-rc", "landed") in watched and ("site-3", "model-1", "landed") in watched
    panels, columns, rows, left_out = monitor_panels(monitor_plot_rows(monitor))
    assert {key for key, _ in panels} == watched and len(panels) == len(watched) * len(rules) and not left_out
    assert width <= MAX_PLOT_WIDTH_PX
    panel_w, panel_h = (round(side * MONITOR_DPI) for side in MONITOR_PANEL_INCHES)
    assert width == columns * panel_w and columns * rows >= len(panels) > columns * (rows - 1)
    assert height == round((MONITOR_PANEL_INCHES[1] * rows + 0.5) * MONITOR_DPI)


def test_the_alerting_series_has_its_own_panel_marked_in_red(lake):
    monitor, _ = tables(lake)
    series = monitor_plot_rows(monitor)

    def only(site, version):
        return [r for r in series if r["site"] == site and r["model_version"] == version]

    alerting, quiet = only("site-3", "v2-rc"), only("site-1", "model-1")
    assert any(r["status"] == "alert" for r in alerting) and not any(r["status"] == "alert" for r in quiet)
    marked, unmarked = red_pixels(monitor_plot_png(alerting)), red_pixels(monitor_plot_png(quiet))
    assert marked > 2 * unmarked  # the large red crosses and the red frame, beyond the bounds' dashed lines


def many_series(monitor: pa.Table, sites: int) -> pa.Table:
    """The monitor's rows of site-1 and site-3 copied to `sites` sites (site-3's alert at the last one)."""
    rows = []
    for k in range(sites):
        source = "site-3" if k == sites - 1 else "site-1"
        for row in monitor.filter(pc.equal(monitor.column("site"), source)).to_pylist():
            rows.append({**row, "site": f"site-{k + 100}"})
    return pa.Table.from_pylist(rows, monitor.schema)


def test_many_series_wrap_into_rows_and_the_panels_stay_bounded_keeping_the_alert(lake):
    monitor, _ = tables(lake)
    wide = many_series(monitor, 40)  # 40 sites x 2 or 3 versions x 2 rules
    series = monitor_plot_rows(wide)
    panels, columns, rows, left_out = monitor_panels(series)
    assert rows <= MAX_PANEL_ROWS and left_out > 0
    assert ("site-139", "v2-rc", "landed") in {key for key, _ in panels}  # the alert is drawn
    assert columns * MONITOR_PANEL_INCHES[0] * MONITOR_DPI <= MAX_PLOT_WIDTH_PX  # the figure's size (drawn above)


def test_the_trend_plot_of_many_periods_is_no_wider_than_the_cap():
    periods = ["all"] + [f"{2000 + m // 12}-{m % 12 + 1:02d}" for m in range(120)]
    trend = pa.table(
        {
            "period": periods,
            "pool": ["full_counterfactual"] * len(periods),
            "metric": ["Delta_authority"] * len(periods),
            "unit": ["image_weighted"] * len(periods),
            "estimate": [0.1] * len(periods),
            "ci_lower": [0.0] * len(periods),
            "ci_upper": [0.2] * len(periods),
        }
    )
    assert png_size(trend_plot_png(trend))[0] <= MAX_PLOT_WIDTH_PX


def trend_table_lines(md: str) -> tuple[list[str], list[str]]:
    text = section(md, SECTION_TITLES["trend"])
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return lines[0].strip("|").split(" | "), lines[1:]


def test_the_trend_section_names_site_and_version_once_per_row(lake):
    _, trend = tables(lake)
    md = (lake / "reports" / "report.md").read_text()
    header, body = trend_table_lines(md)
    header = [cell.strip() for cell in header]
    assert header[:2] == ["site", "model_version"], header
    assert len(body) == len(set(body)), "duplicated rows in the Trend table"
    keys = [tuple(cell.strip() for cell in line.strip("|").split(" | ")[:6]) for line in body]
    assert len(keys) == len(set(keys))  # site x model version x pool x period x unit x metric, once each
    metrics = pa.array(["intervention_rate", "delta", "Delta_authority"])
    reported = trend.filter(pc.is_in(trend.column("metric"), metrics))
    assert len(body) == reported.num_rows
    sites = {(k[0], k[1]) for k in keys}
    assert sites == {(r["site"], r["model_version"]) for r in trend.to_pylist()}
    assert ("site-3", "v2-rc") in sites and ("all", "all") in sites
    page = (lake / "reports" / "report.html").read_text()
    trend_html = html_section(page, SECTION_TITLES["trend"])
    assert re.search(r"<th[^>]*>site</th>\s*<th[^>]*>model_version</th>", trend_html), trend_html[:2000]
    assert re.search(r"<td[^>]*>site-3</td>\s*<td[^>]*>v2-rc</td>", trend_html)


def test_the_trend_picture_draws_the_pool_of_every_site_and_version_only(lake):
    from autheval.monitoring.landing import trend_plot_table

    _, trend = tables(lake)
    site, version = trend.column("site"), trend.column("model_version")
    pooled = trend.filter(pc.and_(pc.equal(site, "all"), pc.equal(version, "all")))
    drawn = (lake / "reports" / "report_trend.png").read_bytes()
    assert drawn == trend_plot_png(trend_plot_table(pooled))
    assert png_size(drawn)[0] <= MAX_PLOT_WIDTH_PX


def test_the_alert_is_named_with_its_site_and_version_in_the_markdown_and_html(lake):
    md = section((lake / "reports" / "report.md").read_text(), SECTION_TITLES["monitoring"])
    assert re.search(r"^\| site-3 \| v2-rc \| Delta \(cluster-equal\) \|", md, re.M)
    picture = re.search(r"!\[([^\]]*)\]\(report_monitor\.png\)", md)
    assert picture and "alert marked at site-3 / v2-rc (Delta (cluster-equal))" in picture.group(1)
    assert "site-1 / model-1" not in picture.group(1)
    page = html_section((lake / "reports" / "report.html").read_text(), SECTION_TITLES["monitoring"])
    alt = re.search(r"<img alt='([^']*)'", page)
    assert alt and "alert marked at site-3 / v2-rc (Delta (cluster-equal))" in html.unescape(alt.group(1))
    assert re.search(r"<td[^>]*>site-3</td>\s*<td[^>]*>v2-rc</td>", page)


def test_a_trend_without_site_columns_keeps_its_report_table():
    from autheval.reporting.report import report_queries

    old = ("period", "pool", "unit", "metric", "estimate", "ci_lower", "ci_upper", "n", "n_clusters")
    old += ("available", "status", "reason")
    assert report_queries({"trend": old})["trend"] == "reports/report_trend_pooled"
    assert report_queries({"trend": (*old, "site", "model_version")})["trend"] == "reports/report_trend"
