"""The report as one self-contained HTML page with its inline CSS (STYLE): plots as data URIs, no script,
no link off the page, every lake value escaped.
"""

from __future__ import annotations

import base64
import html
import re

import pyarrow as pa

from autheval.reporting.report.document import Document, Heading, Image, ReportInputs, Table, Text, _fmt
from autheval.reporting.report.reporting_items import TO_BE_SUPPLIED
from autheval.reporting.report.sections import _document

STYLE = (
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0 auto;max-width:1150px;"
    "padding:1.5em 2em;color:#1d1d1f;line-height:1.45}"
    "h1{font-size:1.7em;margin-bottom:.3em}h2{font-size:1.3em;border-bottom:2px solid #dde3ea;padding-bottom:.2em;"
    "margin-top:1.8em}h3{font-size:1.05em;margin-top:1.3em}"
    "nav{background:#f5f7fa;border:1px solid #dde3ea;padding:.5em .9em;font-size:13px}nav a{margin-right:1.1em}"
    "p{margin:.45em 0}.note{color:#555;font-size:13px}"
    ".callout{background:#fff6e0;border-left:4px solid #e0a100;padding:.5em .8em}"
    "table{border-collapse:collapse;font-size:12.5px;margin:.5em 0 1em}"
    "td,th{border:1px solid #ccd3db;padding:3px 7px;text-align:right;vertical-align:top}"
    "th{background:#eef2f6;text-align:left}td.text{text-align:left;overflow-wrap:anywhere}"
    "tr:nth-child(even) td{background:#fafbfc}.scroll{overflow-x:auto;max-width:100%}"
    "table.numbers td{white-space:nowrap}table.numbers td:first-child{white-space:normal}"
    "td.todo{color:#8a6d00;font-style:italic}"
    "details{margin:.4em 0 1em}summary{cursor:pointer;color:#2a5db0}"
    "img{max-width:100%;border:1px solid #e3e7ec}code{font-size:12px}"
    ".items td{text-align:left}.items td:last-child{max-width:640px}"
    "td.hash{font-family:monospace;font-size:11px;word-break:break-all;text-align:left;min-width:12em}"
)


def _html_parts(parts: list) -> str:
    out = []
    for part in parts:
        if isinstance(part, tuple):
            style, text = part
            tag = "strong" if style == "b" else "code"
            out.append(f"<{tag}>{html.escape(str(text))}</{tag}>")
        else:
            out.append(html.escape(str(part)))
    return "".join(out).strip()


_HASH = re.compile(r"^[0-9a-f]{40,64}$")


def _html_table(block: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in block.columns)
    head = f"<tr>{head}</tr>" if any(block.columns) else ""

    def cell(value) -> str:
        text = _fmt(value)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool) or text[:1] in "+-" or text == "NA"
        kind = "todo" if text.startswith(TO_BE_SUPPLIED) else "hash" if _HASH.match(text) else "" if numeric else "text"
        return f"<td{f' class={kind}' if kind else ''}>{html.escape(text)}</td>"

    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in block.rows)
    classes = " ".join(c for c in (block.css, "numbers" if block.numbers else "") if c)
    table = (
        f"<div class=scroll><table{f' class={chr(39)}{classes}{chr(39)}' if classes else ''}>{head}{body}</table></div>"
    )
    if block.collapsed:
        return f"<details><summary>{html.escape(block.collapsed)}</summary>{table}</details>"
    return table


def html_report(
    report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None = None, provenance: str | None = None
) -> str:
    """The report as one self-contained HTML page: inline CSS, plots as data URIs, no script, no link
    off the page; every lake value escaped. Arguments as markdown_report's."""
    doc = _document(report, contrasts, provenance)
    title, lede, sections = doc.title, doc.lede, doc.sections
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for text in lede:
        parts.append(f"<p class='{text.kind}'>{_html_parts(text.parts)}</p>")
    parts.append("<nav>" + "".join(f"<a href='#{s.anchor}'>{html.escape(s.title)}</a>" for s in sections) + "</nav>")
    for section in sections:
        parts.append(f"<section id='{section.anchor}'><h2>{html.escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Heading):
                parts.append(f"<h3>{html.escape(block.title)}</h3>")
            elif isinstance(block, Text):
                parts.append(f"<p class='{block.kind}'>{_html_parts(block.parts)}</p>")
            elif isinstance(block, Image):
                data = base64.b64encode(block.png).decode()
                parts.append(f"<img alt='{html.escape(block.alt)}' src='data:image/png;base64,{data}'>")
            elif isinstance(block, Table):
                parts.append(_html_table(block))
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
