"""The report of a lake, from whatever it holds: the tables REPORT_TABLES names that the lake has, the
parts their SQL files fill, the lake's state (this run, the served snapshot before it), and the files
written beside each other in <lake>/reports/ (report.md, report.html, report.pdf and the plots). One
function for every caller (the `report` asset, a monitor run): a lake of landed logs alone, with no
study_summary, gets its report too, each section saying in words which table it lacks.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from autheval.reporting.report.document import Document, ReportInputs
from autheval.reporting.report.html import html_report
from autheval.reporting.report.markdown import markdown_report
from autheval.reporting.report.pdf import pdf_report
from autheval.reporting.report.queries import REPORT_TABLES, report_queries
from autheval.reporting.report.sections import build_report, without_clock
from warehouse import sql
from warehouse.atomic import atomic_write_bytes, atomic_write_text
from warehouse.lake import Lake


def lake_state(store: Lake) -> dict:
    """This run's id and the served snapshot before it (what the report's provenance names)."""
    served, run = store.snapshot(), store.run()
    return {
        "run_id": run.run_id if run is not None else None,
        "snapshot": served.snapshot,
        "snapshot_run_id": served.run_id,
        "committed_at": served.committed_at,
        "software": served.software,
        "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def lake_inputs(store: Lake, state: dict | None = None) -> ReportInputs:
    """ReportInputs from the report's tables the lake has (any of them may be absent) and its state."""
    tables = {name: store.read(name) for name in REPORT_TABLES if store.has_table(name)}
    con = sql.connect()
    for name, table in tables.items():
        con.register(name, table)
    columns = {name: table.column_names for name, table in tables.items()}
    parts = {part: sql.run(con, name).to_pylist() for part, name in report_queries(columns).items()}
    return ReportInputs(
        summary=tables.get("study_summary"),
        contrasts=tables.get("contrasts"),
        parts=parts,
        columns=columns,
        lake=lake_state(store) if state is None else state,
    )


def printable_report(inputs: ReportInputs, doc: Document) -> bytes:
    """reports/report.pdf: `doc` (built from `inputs`) without the clock time it was written at (the served
    snapshot and the run name the lake's state instead), so the same lake prints the same bytes."""
    lake = inputs.lake
    if lake.get("snapshot") and lake.get("run_id"):  # staged in a run: the lake as that run commits it
        note = (
            f"The printed form of report.html: the lake as run {lake['run_id']} commits it, after snapshot "
            f"{lake['snapshot']} (committed {lake.get('committed_at')}); the same lake and run print the same bytes."
        )
    elif lake.get("snapshot"):
        note = (
            f"The printed form of report.html: the lake as of snapshot {lake['snapshot']} (committed "
            f"{lake.get('committed_at')}); the same lake prints the same bytes."
        )
    else:
        note = "The printed form of report.html, before the lake's first snapshot."
    return pdf_report(without_clock(doc, inputs), note)


def write_report(store: Lake, state: dict | None = None) -> tuple[ReportInputs, Document, dict[str, Path]]:
    """Build the lake's report and write reports/report.md, report.html, report.pdf (printable_report) and
    the PNG files the Markdown names, each atomically in place (published when the run commits). Returns
    the inputs, the document and the paths written by file name."""
    inputs = lake_inputs(store, state)
    doc = build_report(inputs)
    written = {
        name: atomic_write_bytes(store.publish_path(f"reports/{name}"), png) for name, png in doc.images().items()
    }
    written["report.md"] = atomic_write_text(store.publish_path("reports/report.md"), markdown_report(doc))
    written["report.html"] = atomic_write_text(store.publish_path("reports/report.html"), html_report(doc))
    written["report.pdf"] = atomic_write_bytes(store.publish_path("reports/report.pdf"), printable_report(inputs, doc))
    return inputs, doc, written
