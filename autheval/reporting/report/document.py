"""The report's document model: the inputs it is built from (ReportInputs) and the blocks, sections
and Document both renderers lay out, kept at the bottom of the package so every section builder and
renderer imports it and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from autheval.reporting.tables import cell


@dataclass
class ReportInputs:
    """What the report is made of: the headline tables (None where the lake has none: a lake of landed
    logs alone has no study_summary), the parts the SQL files gave (rows as dicts; a part the lake could
    not fill is absent), the lake's tables with their columns, and the lake's state (run id of this run,
    the served snapshot before it)."""

    summary: pa.Table | None = None
    contrasts: pa.Table | None = None
    parts: dict[str, list[dict]] = field(default_factory=dict)
    columns: dict[str, list[str]] = field(default_factory=dict)
    lake: dict = field(default_factory=dict)
    note: str | None = None  # a free line under the title (older callers' provenance text)

    def rows(self, part: str) -> list[dict]:
        return self.parts.get(part) or []

    def has(self, part: str) -> bool:
        return part in self.parts


@dataclass
class Text:
    """A paragraph: plain strings and (style, text) pairs, style 'b' (bold) or 'code'."""

    parts: list
    kind: str = "p"  # 'p', 'note' (small print) or 'callout' (a warning box)


@dataclass
class Table:
    columns: list[str]
    rows: list[list]
    collapsed: str | None = None  # a summary line: the table sits in a closed <details> in HTML
    numbers: bool = False  # a table of estimates: cells past the first two do not wrap
    css: str = ""  # an extra class of the HTML table


@dataclass
class Image:
    file: str  # the PNG beside report.md
    png: bytes
    alt: str


@dataclass
class Heading:
    title: str


@dataclass
class Section:
    title: str
    anchor: str
    blocks: list = field(default_factory=list)


@dataclass
class Document:
    """The report laid out once: title, the lede under it, the sections in reading order."""

    title: str
    lede: list[Text]
    sections: list[Section]

    def images(self) -> dict[str, bytes]:
        """The PNG files the Markdown names, by file name (written beside report.md)."""
        return {b.file: b.png for s in self.sections for b in s.blocks if isinstance(b, Image)}


def _fmt(value) -> str:
    """A table cell of the report: NA, yes/no, four decimals."""
    return cell(value, missing="NA", booleans=("no", "yes"), digits=4)
