"""study_summary and report: the headline table and the reviewer's report (Markdown and a self-contained
HTML page) built from what the lake holds."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from dagster import MaterializeResult, MetadataValue, asset

from assets.common import REPORTS, lake_query, write_table
from assets.resources import LakeResource
from autheval.reporting.report import (
    REPORT_TABLES,
    ReportInputs,
    build_report,
    html_report,
    markdown_report,
    report_queries,
)
from warehouse import sql
from warehouse.atomic import atomic_write_bytes, atomic_write_text
from warehouse.lake import Lake
from warehouse.sql import connect


@asset(
    group_name=REPORTS,
    kinds={"parquet"},
    deps=["estimates"],
    description=(
        "Per analysis: n, p, delta and the authority gap with its interval in both units (the study's headline table)."
    ),
)
def study_summary(lake: LakeResource):
    return write_table(lake.lake(), "study_summary", lake_query(lake.lake(), "estimates/study_summary", ["estimates"]))


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


@asset(
    group_name=REPORTS,
    kinds={"html", "markdown"},
    deps=[
        study_summary,
        "contrasts",
        "estimates",
        "subgroups",
        "fairness",
        "selections",
        "records",
        "proposals",
        "images",
        "clusters",
        "contexts",
        "ingest_report",
        "duplicate_report",
        "duplicate_removals",
        "input_files",
        "vlm_scores",
        "probe_features",
    ],
    description=(
        "reports/report.md and reports/report.html (self-contained): each analysis in plain words, the "
        "decomposition, record levels, forest plots by regime, adjusted contrasts, subgroups and "
        "fairness, trend, reporting items (CONSORT-AI, DECIDE-AI, TRIPOD+AI) and provenance."
    ),
)
def report(lake: LakeResource):
    store = lake.lake()
    tables = {name: store.read(name) for name in REPORT_TABLES if store.has_table(name)}
    con = connect()
    for name, table in tables.items():
        con.register(name, table)
    columns = {name: table.column_names for name, table in tables.items()}
    parts = {part: sql.run(con, name).to_pylist() for part, name in report_queries(columns).items()}
    doc = build_report(
        ReportInputs(
            summary=tables["study_summary"],
            contrasts=tables.get("contrasts"),
            parts=parts,
            columns=columns,
            lake=lake_state(store),
        )
    )
    for name, png in doc.images().items():  # in place when the run commits
        atomic_write_bytes(store.publish_path(f"reports/{name}"), png)
    md = atomic_write_text(store.publish_path("reports/report.md"), markdown_report(doc))
    page = atomic_write_text(store.publish_path("reports/report.html"), html_report(doc))
    plot = base64.b64encode(doc.images()["forest_plot.png"]).decode()
    return MaterializeResult(
        metadata={
            "markdown": MetadataValue.path(str(md)),
            "html": MetadataValue.path(str(page)),
            "parts": MetadataValue.text(", ".join(sorted(parts))),
            "plot": MetadataValue.md(f"![forest plot](data:image/png;base64,{plot})"),
        }
    )
