"""The study report: a front page a reviewer can read, as Markdown and as one self-contained HTML page
(inline CSS, plots as data URIs, no script, no network), and as a printable PDF, built from what the
lake holds.

The lake's `report` asset runs the SQL files named in REPORT_QUERIES over the tables it has and hands the
results here (`ReportInputs`); this package only words and lays them out, so both formats come from one
list of sections. Every lake value is escaped where it is written (a mechanism name may be markup).

One module per idea, each importing only those below it: `document` (the inputs and the blocks),
`queries` (what the asset asks of the lake), `words` (what the section builders share), `plots`,
the section builders (`sections_study`, `sections_data`, `sections_monitoring`, `reporting_items`),
`sections` (build_report), the renderers `markdown`, `html` and `pdf` (the printable form, written by
`lake` only), and `lake` (a lake's report from whatever it holds: the asset's reads and the files it
writes; imported by its callers, not here, as it loads DuckDB).
This file exposes only the entry points the rest of the code calls.
"""

from autheval.reporting.report.document import ReportInputs
from autheval.reporting.report.html import html_report
from autheval.reporting.report.markdown import markdown_report
from autheval.reporting.report.plots import trend_plot_png
from autheval.reporting.report.queries import REPORT_TABLES, report_queries
from autheval.reporting.report.sections import build_report
from autheval.reporting.report.sections_study import headline

__all__ = [
    "REPORT_TABLES",
    "ReportInputs",
    "build_report",
    "headline",
    "html_report",
    "markdown_report",
    "report_queries",
    "trend_plot_png",
]
