"""The report as Markdown (the plots are PNG files beside it): every lake value escaped and kept on one
line, so a mechanism name cannot break the page. Escaped the Markdown way, with backslashes, never with
HTML entities: report.md reads as written (`<30`, `<lake>`), and `&lt;` in a code span would show as
such.
"""

from __future__ import annotations

import re

import pyarrow as pa

from autheval.reporting.report.document import Document, Heading, Image, ReportInputs, Table, Text, _fmt
from autheval.reporting.report.sections import _document

# What could start markup in CommonMark / GitHub Markdown inside a line, escaped with a backslash: raw
# HTML and autolinks (<), entities (&name; &#1;), code spans, emphasis, strikethrough, math ($), a link or
# image (](, ][, ]:). An underscore inside a word (ita_category) starts nothing and is left as written.
_MARKUP = re.compile(r"[\\`*~$<]|&(?=#?[0-9A-Za-z]+;)|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|\](?=[(\[:])")
# What starts a block at the start of a line: a blockquote, heading, list item or setext underline
_LINE_START = re.compile(r"^(?:[>#+=-]|\d+(?=[.)]))")  # an ordered item's digits: its '.' or ')' escaped


def _md_text(value) -> str:
    """A lake value (or the report's words) as Markdown text: markup escaped with backslashes, one line."""
    return _MARKUP.sub(lambda m: "\\" + m.group(0), re.sub(r"\s+", " ", str(value)))


def _md_line(text: str) -> str:
    """A paragraph that cannot start a block: its first character escaped where it would."""
    return _LINE_START.sub(lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), text)


def _md_code(value) -> str:
    """Text in a code span: shown as written (a code span takes no escapes), a backtick made a quote."""
    return re.sub(r"\s+", " ", str(value)).replace("`", "'")


def _md_cell(value) -> str:
    return _md_text(_fmt(value)).replace("|", "\\|")


def _md_parts(parts: list) -> str:
    out = []
    for part in parts:
        if isinstance(part, tuple):
            style, text = part
            out.append(f"**{_md_text(text)}**" if style == "b" else f"`{_md_code(text)}`")
        else:
            out.append(_md_text(part))
    return _md_line("".join(out).strip())


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
