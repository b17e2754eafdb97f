"""study_summary and report: the headline table and the Markdown/HTML report with a forest plot."""

from __future__ import annotations

import base64

from dagster import MaterializeResult, MetadataValue, asset

from assets.common import REPORTS, connect_with, query, write_table
from autheval.report import forest_plot_png, html_report, markdown_report
from dagster_project.resources import LakeResource
from warehouse.atomic import atomic_write_bytes, atomic_write_text


@asset(group_name=REPORTS, kinds={"parquet"}, deps=["estimates"], description=(
    "Per analysis: n, p, delta and the authority gap with its interval in both units (the study's "
    "headline table)."))
def study_summary(lake: LakeResource):
    return write_table(lake.lake(), "study_summary", query(connect_with(lake.lake(), ["estimates"]), "study_summary"))


@asset(group_name=REPORTS, kinds={"html", "markdown"}, deps=[study_summary, "contrasts"], description=(
    "reports/report.md and reports/report.html (self-contained, forest plot of the gaps and intervals)."))
def report(lake: LakeResource):
    store = lake.lake()
    summary, contrasts = store.read("study_summary"), store.read("contrasts")
    first = summary.to_pylist()[0] if summary.num_rows else {}
    provenance = (f"Scheme {first.get('scheme')}, {first.get('reps')} whole-cluster bootstrap replicates; "
                  "Delta = J_auth - J = p * delta, image-weighted (ratio of sums) and cluster-equal.")
    png = forest_plot_png(summary, contrasts)
    atomic_write_bytes(store.publish_path("reports/forest_plot.png"), png)  # in place when the run commits
    md = atomic_write_text(store.publish_path("reports/report.md"), markdown_report(summary, contrasts, provenance))
    page = atomic_write_text(store.publish_path("reports/report.html"), html_report(summary, contrasts, provenance, png))
    return MaterializeResult(metadata={"markdown": MetadataValue.path(str(md)), "html": MetadataValue.path(str(page)),
                                       "plot": MetadataValue.md(f"![forest plot](data:image/png;base64,{base64.b64encode(png).decode()})")})
