"""The report as a printable PDF (reports/report.pdf beside report.html), laid out from the same Document
as the Markdown and the HTML: A4 landscape pages of headings, paragraphs and tables (a fixed-width font,
each cell wrapped to its column, the header repeated on a new page) and the plots. matplotlib's PDF
backend (already a dependency, for the plots) with the PDF standard fonts (Helvetica, Courier: nothing
embedded, every viewer has them, the text stays text), its settings fixed here and no creation date
written, so the same document gives the same bytes. Those fonts cover Windows-1252 (Latin-1 and a few
more): any other character prints as <U+XXXX>, so a name never prints as another. A collapsed table (a
closed <details> in the HTML) prints its summary line only; its rows are in report.html and report.md.
"""

from __future__ import annotations

import io
import re
import textwrap
import warnings
from typing import TYPE_CHECKING, Any

from autheval import __version__
from autheval.reporting.report.document import Document, Heading, Image, Table, Text, _fmt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PAGE_INCHES = (11.69, 8.27)  # A4 landscape
MARGIN_INCHES = 0.55
SIZES = {"title": 15.0, "section": 12.5, "heading": 10.5, "p": 8.5, "note": 7.5, "table": 6.5, "footer": 6.5}
LEADING = 1.35  # line height per font size
SANS, MONO = "sans-serif", "monospace"  # Helvetica and Courier (RC)
SANS_ADVANCE = 0.58  # Helvetica's average glyph width in running text, in em, with room: a wrapped line stays inside
MONO_ADVANCE = 0.6  # Courier's glyph width, in em
MAX_CELL_CHARS = 60  # a wider cell wraps
MIN_CELL_CHARS = 4
COLUMN_GAP = " | "
IMAGE_DPI = 110  # a plot's pixels per inch on paper, at most (a wide one is scaled down to the page)
# everything the layout reads from matplotlib's settings, fixed whatever the user's matplotlibrc says
RC: dict[Any, Any] = {
    "pdf.use14corefonts": True,
    "pdf.compression": 6,
    "font.family": SANS,
    "font.sans-serif": ["Helvetica"],
    "font.monospace": ["Courier"],
    "text.usetex": False,
    "text.antialiased": True,
    "image.interpolation": "none",
    "image.resample": False,
}


def _plain(text) -> str:
    """A value as one printed line: white space (line breaks included) made single spaces, and a character
    the standard fonts lack (outside Windows-1252) written as <U+XXXX>."""
    return "".join(_printable(c) for c in re.sub(r"\s+", " ", str(text)).strip())


def _printable(char: str) -> str:
    try:
        char.encode("cp1252")
    except UnicodeEncodeError:
        return f"<U+{ord(char):04X}>"
    return char


def _words(parts: list) -> str:
    return _plain("".join(part[1] if isinstance(part, tuple) else part for part in parts))


class _Pages:
    """Pages filled top to bottom; a block that does not fit on the page starts the next one."""

    def __init__(self, pdf, footer: str):
        self.pdf, self.footer = pdf, footer
        self.fig: Figure | None = None
        self.y = 0.0  # inches from the bottom edge of the page to the next line's top
        self.number = 0

    @property
    def page(self) -> Figure:
        """The page being filled (one is started by need() before anything is drawn)."""
        if self.fig is None:
            raise RuntimeError("no page started")
        return self.fig

    @property
    def width(self) -> float:
        return PAGE_INCHES[0] - 2 * MARGIN_INCHES

    def new_page(self) -> None:
        from matplotlib.figure import Figure

        self.finish()
        self.fig = Figure(figsize=PAGE_INCHES)
        self.number += 1
        self.y = PAGE_INCHES[1] - MARGIN_INCHES

    def finish(self) -> None:
        if self.fig is None:
            return
        self._text(
            PAGE_INCHES[0] - MARGIN_INCHES,
            MARGIN_INCHES / 2,
            f"{self.footer} - page {self.number}",
            SIZES["footer"],
            ha="right",
            color="#555555",
        )
        self.pdf.savefig(self.fig)
        self.fig = None

    def need(self, inches: float) -> bool:
        """Room for `inches` more on this page, else a new page; True when a new page was started."""
        if self.fig is None or self.y - inches < MARGIN_INCHES:
            self.new_page()
            return True
        return False

    def space(self, inches: float) -> None:
        self.y -= inches

    def _text(self, x: float, y: float, text: str, size: float, weight: str = "medium", **style) -> None:
        """One line of text at (x, y) inches; the AFM fonts' regular weight is 'medium'."""
        self.page.text(
            x / PAGE_INCHES[0],
            y / PAGE_INCHES[1],
            text,
            fontsize=size,
            fontweight=weight,
            parse_math=False,
            va="baseline",
            **style,
        )

    def line(self, text: str, size: float, family: str = SANS, **style) -> None:
        height = size * LEADING / 72
        self.need(height)
        self._text(MARGIN_INCHES, self.y - size / 72, text, size, family=family, **style)
        self.y -= height

    def paragraph(self, text: str, size: float, **style) -> None:
        chars = max(20, int(self.width * 72 / (size * SANS_ADVANCE)))
        for line in textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False) or [""]:
            self.line(line, size, **style)
        self.space(size * 0.45 / 72)

    def table(self, table: Table) -> None:
        size = SIZES["table"]
        chars = int(self.width * 72 / (size * MONO_ADVANCE))
        header = [_plain(c) for c in table.columns]
        cells = [[_plain(_fmt(v)) for v in row] for row in table.rows]
        widths = _column_widths([header, *cells], chars)
        head = _wrapped(header, widths)
        rule = "-+-".join("-" * w for w in widths)
        height = size * LEADING / 72

        def print_header() -> None:
            for line in head:
                self.line(line, size, family=MONO, weight="bold")
            self.line(rule, size, family=MONO)

        rows = [_wrapped(row, widths) for row in cells]
        gap = height * 0.4 if any(len(lines) > 1 for lines in rows) else 0.0  # wrapped rows stand apart
        self.need(height * (len(head) + 2))
        print_header()
        for lines in rows:
            if self.need(height * len(lines)):
                print_header()
            for line in lines:
                self.line(line, size, family=MONO)
            self.space(gap)
        self.space(size * 0.8 / 72)

    def image(self, png: bytes) -> None:
        from matplotlib.image import imread

        pixels = imread(io.BytesIO(png), format="png")
        rows, columns = pixels.shape[:2]
        width = min(self.width, columns / IMAGE_DPI)
        height = width * rows / columns
        tallest = PAGE_INCHES[1] - 2 * MARGIN_INCHES
        if height > tallest:
            width, height = tallest * columns / rows, tallest
        self.need(height)
        ax = self.page.add_axes(
            (
                MARGIN_INCHES / PAGE_INCHES[0],
                (self.y - height) / PAGE_INCHES[1],
                width / PAGE_INCHES[0],
                height / PAGE_INCHES[1],
            )
        )
        ax.imshow(pixels, interpolation="none", aspect="auto")
        ax.set_axis_off()
        self.space(height + 0.12)


def _column_widths(cells: list[list[str]], chars: int) -> list[int]:
    """Each column's width in characters: its widest cell (at most MAX_CELL_CHARS), the widest columns
    narrowed one character at a time until the row fits `chars` (no column under MIN_CELL_CHARS)."""
    widths = [max(1, min(MAX_CELL_CHARS, max(len(row[i]) for row in cells))) for i in range(len(cells[0]))]
    room = chars - len(COLUMN_GAP) * (len(widths) - 1)
    while sum(widths) > room and max(widths) > MIN_CELL_CHARS:
        widest = widths.index(max(widths))
        widths[widest] -= 1
    return widths


def _wrapped(row: list[str], widths: list[int]) -> list[str]:
    """One table row as printed lines: each cell wrapped to its column, the columns side by side."""
    pieces = [
        textwrap.wrap(cell, width, break_long_words=True) or [""] for cell, width in zip(row, widths, strict=True)
    ]
    depth = max(len(p) for p in pieces)
    return [
        COLUMN_GAP.join((p[i] if i < len(p) else "").ljust(w) for p, w in zip(pieces, widths, strict=True)).rstrip()
        for i in range(depth)
    ]


def pdf_report(doc: Document, note: str | None = None) -> bytes:
    """The report as PDF bytes: the title, the lede (and `note`, a line under it), then every section in
    reading order. The same document and note give the same bytes."""
    import matplotlib
    from matplotlib.backends.backend_pdf import PdfPages

    buffer = io.BytesIO()
    metadata = {"Title": _plain(doc.title), "Creator": f"autheval {__version__}", "CreationDate": None}
    with matplotlib.rc_context(RC), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with PdfPages(buffer, metadata=metadata) as pdf:
            pages = _Pages(pdf, _plain(doc.title))
            pages.paragraph(_plain(doc.title), SIZES["title"], weight="bold")
            for text in doc.lede:
                _text_block(pages, text)
            if note:
                pages.paragraph(_plain(note), SIZES["note"], color="#555555")
            for section in doc.sections:
                pages.need(4 * SIZES["section"] / 72)  # a section title is never the last line of a page
                pages.space(SIZES["section"] * 0.5 / 72)
                pages.paragraph(_plain(section.title), SIZES["section"], weight="bold")
                for block in section.blocks:
                    if isinstance(block, Heading):
                        pages.need(4 * SIZES["heading"] / 72)
                        pages.paragraph(_plain(block.title), SIZES["heading"], weight="bold")
                    elif isinstance(block, Text):
                        _text_block(pages, block)
                    elif isinstance(block, Image):
                        pages.image(block.png)
                        pages.paragraph(_plain(block.alt), SIZES["note"], color="#555555")
                    elif isinstance(block, Table):
                        if block.collapsed:
                            pages.paragraph(
                                f"{_plain(block.collapsed)}: the rows are in report.html and report.md.",
                                SIZES["note"],
                                style="italic",
                            )
                        else:
                            pages.table(block)
            pages.finish()
    return buffer.getvalue()


def _text_block(pages: _Pages, text: Text) -> None:
    if text.kind == "callout":
        pages.paragraph(_words(text.parts), SIZES["p"], weight="bold", color="#7a5200")
    elif text.kind == "note":
        pages.paragraph(_words(text.parts), SIZES["note"], color="#444444")
    else:
        pages.paragraph(_words(text.parts), SIZES["p"])
