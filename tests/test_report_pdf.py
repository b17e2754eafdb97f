"""The printable report (issue 28, item 2.1): reports/report.pdf beside report.html wherever the report is
written, holding the monitoring sections (the status per site x model version, every alert with its site,
version and id, what was done about it, the acceptance criteria and which fired) and the plots, the same
bytes for the same lake; and the acceptance criteria section, stated from the protocol as applied."""

from __future__ import annotations

import hashlib
import re
import shutil
import time
import zlib
from pathlib import Path

import pytest

from autheval.monitoring.monitor import alerts
from autheval.reporting.report.document import Document, Section, Table, Text
from autheval.reporting.report.pdf import pdf_report
from autheval.reporting.report.words import SECTION_TITLES
from tests.test_acknowledgements import PROTOCOL, ack, alerting_lake
from warehouse.lake import Lake

_ESCAPE = re.compile(rb"\\([nrtbf()\\]|[0-7]{1,3})")
_SIMPLE = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"(": b"(", b")": b")", b"\\": b"\\"}


def pdf_lines(data: bytes) -> list[str]:
    """The text of every line a PDF shows, in page order: each content stream inflated, each string shown
    by Tj unescaped (the standard fonts' Windows-1252)."""
    lines = []
    for start in re.finditer(rb"stream\n", data):  # matplotlib writes "stream\n" <deflate> "\nendstream"
        try:  # the deflate stream ends itself: a trailing "\r" byte of it is data, never part of a line end
            content = zlib.decompressobj().decompress(data[start.end() :])
        except zlib.error:
            continue
        for shown in re.finditer(rb"\(((?:\\.|[^\\)])*)\)\s*Tj", content, re.S):
            raw = _ESCAPE.sub(lambda m: _SIMPLE.get(m.group(1)) or bytes([int(m.group(1), 8)]), shown.group(1))
            lines.append(raw.decode("cp1252"))
    return lines


def pdf_rows(lines: list[str]) -> list[list[str]]:
    """The PDF's table rows, each cell's wrapped lines joined again: a line whose first cell is blank
    continues the row above it."""
    rows: list[list[list[str]]] = []
    for line in lines:
        if " | " not in line:
            continue
        cells = [cell.strip(" |") for cell in line.split(" | ")]
        if cells[0] or not rows:
            rows.append([[cell] for cell in cells])
        else:
            for i, cell in enumerate(cells[: len(rows[-1])]):
                rows[-1][i].append(cell)
    return [[" ".join(part for part in cell if part) for cell in row] for row in rows]


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """The alerting lake of tests/test_acknowledgements.py, one alert acknowledged and reviewed, the
    report rebuilt by a monitor run."""
    from dagster_project.monitor_run import monitor_run

    root = tmp_path_factory.mktemp("pdf")
    built = alerting_lake(root)
    pooled = next(a["alert_id"] for a in alerts(Lake(built).read("monitor")) if a["site"] == "all")
    assert ack(built, pooled, note="looked at the cases") == 0
    assert ack(built, pooled, by="Safety board", action="reviewed", note="bound kept") == 0
    assert monitor_run(built, root / "protocol.yaml", out=lambda line: None, settle_seconds=0) == 3
    return built


def test_every_monitor_run_writes_the_pdf_beside_the_html_with_the_monitoring_record(lake):
    reports = lake / "reports"
    data = (reports / "report.pdf").read_bytes()
    assert (reports / "report.html").exists() and data.startswith(b"%PDF-")
    lines = pdf_lines(data)
    text = "\n".join(lines)
    for title in (SECTION_TITLES["trend"], SECTION_TITLES["monitoring"], SECTION_TITLES["acceptance"]):
        assert title in lines, title
    assert "Status at the latest look" in lines and "Alerts and what was done about them" in lines
    for alert in alerts(Lake(lake).read("monitor")):  # every alert's row names its id, site and version
        [row] = [line for line in lines if line.startswith(alert["alert_id"] + " ")]
        assert re.match(rf"{alert['alert_id']} +\| {re.escape(alert['site'])} +\| {alert['model_version']} +\|", row)
    assert any(re.match(r"site-2 +\| model-1 +\| p \(image-weighted\) .*\| insufficient$", line) for line in lines)
    rows = pdf_rows(lines)
    criteria = {row[0]: row for row in rows if row[0].startswith("C")}
    assert criteria["C2"][2] == "at most 0.2" and criteria["C2"][-1] == "FIRED: all / all at look 3 (2026-03), in force"
    assert criteria["C1"][-1].startswith("held: no look alerted")
    [pooled] = [row for row in rows if row[1:3] == ["all", "all"] and row[-1].startswith("acknowledged by")]
    assert re.fullmatch(
        r"acknowledged by Dr A\. Ngata \(\S+Z\): looked at the cases; reviewed by Safety board \(\S+Z\): bound kept",
        pooled[-1],
    )
    assert hashlib.sha256(PROTOCOL.encode()).hexdigest() in text
    assert data.count(b"/Subtype /Image") >= 2  # the trend's picture and the monitor's, drawn into the pages


def test_the_same_lake_prints_the_same_bytes(lake, tmp_path):
    from autheval.reporting.report.lake import write_report

    copy = Path(shutil.copytree(lake, tmp_path / "lake", symlinks=True))
    first = write_report(Lake(copy))[2]
    pdf, md = first["report.pdf"].read_bytes(), first["report.md"].read_text()
    time.sleep(1.1)  # the clock moves on: the Markdown says when it was written, the PDF does not
    second = write_report(Lake(copy))[2]
    assert second["report.pdf"].read_bytes() == pdf and second["report.md"].read_text() != md
    assert b"/CreationDate" not in pdf and b"/ModDate" not in pdf
    snapshot = Lake(copy).snapshot().snapshot
    assert f"the lake as of snapshot {snapshot} (committed" in "\n".join(pdf_lines(pdf))


def test_the_pdf_a_run_stages_names_that_run_not_the_snapshot_before_it(lake):
    """The monitor run's PDF commits with the run: it is the lake as the run commits it, not as of the
    snapshot the run started from (which holds none of the run's tables)."""
    from warehouse.snapshots import committed_snapshots

    text = " ".join(pdf_lines((lake / "reports" / "report.pdf").read_bytes()))
    last = committed_snapshots(Lake(lake).location)[-1]  # the snapshot the last run committed, the report in it
    assert f"the lake as run {last.run_id} commits it, after snapshot" in text
    assert "the lake as of snapshot" not in text


def test_the_criteria_section_states_each_criterion_and_which_fired(lake):
    md = (lake / "reports" / "report.md").read_text()
    section = md.split(f"## {SECTION_TITLES['acceptance']}\n", 1)[1].split("\n## ", 1)[0]
    assert f"`{hashlib.sha256(PROTOCOL.encode()).hexdigest()}`" in section and "ack-test-1" in section
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| C")}
    assert set(rows) == {"C1", "C1, a site's override", "C2", "C2, a site's override"}
    floor, capped, override = rows["C1"], rows["C2"], rows["C2, a site's override"]  # by metric, unit, bounds
    assert "| at most 0.2 |" in capped and "image-weighted" in capped
    assert "site-2 / model-1, site-2 / all, all / all |" in capped
    assert "holm correction over a family of 40 hypotheses" in capped and "| 30 lesion clusters" in capped
    assert "FIRED: all / all at look 3 (2026-03), in force" in capped
    assert "| 50 lesion clusters" in override and "site-1 / model-1, site-1 / all |" in override
    assert "FIRED: site-1 / model-1 at look 3 (2026-03), in force; site-1 / all at look 3" in override
    assert "| at least 0.01 |" in floor and "held: no look alerted" in floor and "FIRED" not in floor
    assert "**4 criteria as applied: 2 fired, 2 held.**" in section


# --- the layout, on documents made up here ------------------------------------------------------------


def test_a_name_outside_the_standard_fonts_prints_as_its_code_points_never_as_another_name():
    doc = Document(
        "t",
        [],
        [Section("s", "s", [Table(["site", "note"], [["Zürich (b)", "北京 \\ x"]]), Text(["α-site"])])],
    )
    lines = pdf_lines(pdf_report(doc))
    assert any(line.startswith("Zürich (b) | <U+5317><U+4EAC> \\ x") for line in lines), lines
    assert "<U+03B1>-site" in lines


def test_a_long_cell_wraps_inside_its_column_and_loses_nothing():
    words = " ".join(f"word{i}" for i in range(80))
    lines = pdf_lines(pdf_report(Document("t", [], [Section("s", "s", [Table(["a", "b"], [["x", words]])])])))
    cells = [line.split(" | ", 1)[1] for line in lines if " | " in line and not line.startswith("a ")]
    assert len(cells) > 1 and " ".join(c.strip() for c in cells) == words
    assert max(len(line) for line in lines) <= 200
