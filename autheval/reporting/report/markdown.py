"""The report as Markdown (the plots are PNG files beside it): every lake value escaped and kept on one
line, so a mechanism name cannot break the page.
"""

from __future__ import annotations

import html
import re

import pyarrow as pa

from autheval.reporting.report.document import Document, Heading, Image, ReportInputs, Table, Text, _fmt
from autheval.reporting.report.sections import _document


def _md_text(value) -> str:
    """A lake value as Markdown text: markup escaped, one line."""
    return html.escape(re.sub(r"\s+", " ", str(value)), quote=False)


def _md_cell(value) -> str:
    return _md_text(_fmt(value)).replace("|", "\\|")


def _md_parts(parts: list) -> str:
    out = []
    for part in parts:
        if isinstance(part, tuple):
            style, text = part
            text = _md_text(text)
            out.append(f"**{text}**" if style == "b" else f"`{text.replace('`', chr(39))}`")
        else:
            out.append(_md_text(part))
    return "".join(out).strip()


def markdown_report(
    report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None = None, provenance: str | None = None
) -> str:
    """The report as Markdown (the plots are the PNG files beside it). `report`: a built report, its
    inputs, or (older callers) the study_summary table with `contrasts` and a provenance line."""
    doc = _document(report, contrasts, provenance)
    title, lede, sections = doc.title, doc.lede, doc.sections
    lines = [f"# {_md_text(title)}", ""]
    for text in lede:
        lines += [("> " if text.kind == "callout" else "") + _md_parts(text.parts), ""]
    lines += ["Contents: " + " · ".join(f"[{s.title}](#{s.anchor})" for s in sections), ""]
    for section in sections:
        lines += [f"## {_md_text(section.title)}", ""]
        for block in section.blocks:
            if isinstance(block, Heading):
                lines += [f"### {_md_text(block.title)}", ""]
            elif isinstance(block, Text):
                lines += [("> " if block.kind == "callout" else "") + _md_parts(block.parts), ""]
            elif isinstance(block, Image):
                lines += [f"![{_md_text(block.alt)}]({block.file})", ""]
            elif isinstance(block, Table):
                if block.collapsed:
                    lines += [f"*{_md_text(block.collapsed)}:*", ""]
                lines += [
                    "| " + " | ".join(_md_cell(c) for c in block.columns) + " |",
                    "|" + "---|" * len(block.columns),
                ]
                lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
                lines.append("")
    return "\n".join(lines)
