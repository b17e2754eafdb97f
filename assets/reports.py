"""study_summary and report: the headline table and the reviewer's report (Markdown and a self-contained
HTML page) built from what the lake holds."""

from __future__ import annotations

import base64

from dagster import MaterializeResult, MetadataValue, asset

from assets.common import REPORTS, lake_query, write_table
from assets.resources import LakeResource
from autheval.reporting.report.lake import write_report


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
        "benchmark",
        "transfer",
    ],
    description=(
        "reports/report.md and reports/report.html (self-contained): each analysis in plain words, the "
        "decomposition, record levels, forest plots by regime, adjusted contrasts, subgroups and "
        "fairness, trend, reporting items (CONSORT-AI, DECIDE-AI, TRIPOD+AI) and provenance."
    ),
)
def report(lake: LakeResource):
    inputs, doc, written = write_report(lake.lake())  # from whatever the lake holds (landed logs alone too)
    metadata = {
        "markdown": MetadataValue.path(str(written["report.md"])),
        "html": MetadataValue.path(str(written["report.html"])),
        "parts": MetadataValue.text(", ".join(sorted(inputs.parts))),
    }
    if "forest_plot.png" in doc.images():
        plot = base64.b64encode(doc.images()["forest_plot.png"]).decode()
        metadata["plot"] = MetadataValue.md(f"![forest plot](data:image/png;base64,{plot})")
    return MaterializeResult(metadata=metadata)
