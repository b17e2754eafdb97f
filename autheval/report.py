"""The study report: Markdown and a self-contained HTML page with a forest plot of the authority gaps
and their intervals (matplotlib, PNG embedded), built from the study summary and contrast tables."""

from __future__ import annotations

import base64
import html
import io

import pyarrow as pa

UNITS = (("image", "image-weighted"), ("cluster", "cluster-equal"))


MAX_PLOTTED_CONTRAST_ROWS = 12  # more paired contrasts than this are left to the report's table


def forest_plot_png(summary: pa.Table, contrasts: pa.Table | None = None) -> bytes:
    """Delta_authority with its interval per analysis and unit (and each contrast, when there are at most
    MAX_PLOTTED_CONTRAST_ROWS of them), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary.to_pylist()
    labels, points, lows, highs, colours = [], [], [], [], []
    for row in rows:
        for key, unit in UNITS:
            labels.append(f"{row['study']}: {row['analysis']} ({unit})")
            points.append(row[f"Delta_authority_{key}"])
            lows.append(row[f"Delta_authority_{key}_ci_lower"])
            highs.append(row[f"Delta_authority_{key}_ci_upper"])
            colours.append("#1f77b4" if key == "image" else "#ff7f0e")
    contrast_rows = contrasts.to_pylist() if contrasts is not None else []
    if len(contrast_rows) > MAX_PLOTTED_CONTRAST_ROWS:  # every pair of many mechanisms: the table has them
        contrast_rows = []
    for row in contrast_rows:
        labels.append(f"contrast: {row['contrast']} ({row['unit'].replace('_', '-')})")
        points.append(row["difference"])
        lows.append(row["ci_lower"])
        highs.append(row["ci_upper"])
        colours.append("#2ca02c")
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(labels) + 1.2), dpi=110)
    y = list(range(len(labels)))[::-1]
    for yi, p, lo, hi, c in zip(y, points, lows, highs, colours):
        if p is None:
            continue
        ax.plot([lo, hi], [yi, yi], color=c, lw=2)
        ax.plot([p], [yi], "o", color=c)
    ax.axvline(0.0, color="grey", lw=1, ls="--")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("authority gap Delta = J_auth - J (95% whole-cluster bootstrap interval)")
    ax.set_title("Authority gaps by analysis and evaluation unit")
    return _png(fig)


def _png(fig) -> bytes:
    """A finished figure as PNG bytes (no software tag, so the same figure gives the same bytes)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _interval(row: dict, key: str) -> str:
    if row[key] is None:  # not estimable (e.g. delta with no intervention, p = 0)
        return "NA"
    lower, upper = row[key + "_ci_lower"], row[key + "_ci_upper"]
    if lower is None or upper is None:
        return f"{row[key]:+.4f} [NA]"
    return f"{row[key]:+.4f} [{lower:+.4f}, {upper:+.4f}]"


def _rounded(value, digits: int = 4):
    return None if value is None else round(value, digits)


def headline(row: dict) -> dict:
    """One study_summary row as people read it: p, delta and both gaps with their 95% intervals (NA where
    a number is not estimable, e.g. delta when nothing was changed)."""
    return {
        "study": row["study"], "analysis": row["analysis"], "images": row["n_images"],
        "clusters": row["n_clusters"], "p": _rounded(row["intervention_rate"]),
        "delta": _rounded(row["delta"]),
        "Delta image-weighted [95% CI]": _interval(row, "Delta_authority_image"),
        "Delta cluster-equal [95% CI]": _interval(row, "Delta_authority_cluster"),
    }


def _fmt(value) -> str:
    if value is None:
        return "NA"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _readable(summary: pa.Table) -> pa.Table:
    return pa.Table.from_pylist([headline(r) for r in summary.to_pylist()])


CONTRAST_FLAG = "excludes zero (Holm-adjusted)"
CONTRAST_NOTE = ("The flag is the multiplicity-adjusted one: Holm's adjusted bootstrap p-value below the "
                 "intervals' alpha (0.05 for 95% intervals) over the row's family (every contrast of its study "
                 "in one unit, family_size tests); the raw interval's flag and the Benjamini-Hochberg q-value "
                 "are beside it.")


def contrast_rows(contrasts: pa.Table) -> pa.Table:
    """The contrasts as the report shows them: the headline flag is the adjusted one (a table of an
    older lake, without the adjusted columns, keeps its raw flag, named as such)."""
    out = []
    for r in contrasts.to_pylist():
        row = {"contrast": r["contrast"], "unit": r["unit"], "difference": r["difference"],
               "ci_lower": r["ci_lower"], "ci_upper": r["ci_upper"]}
        if "excludes_zero_adjusted" in r:
            row.update({CONTRAST_FLAG: r["excludes_zero_adjusted"], "p": r["p_value"],
                        "p (Holm)": r["p_adjusted"], "q (BH)": r["q_value"], "family": r["family"],
                        "family_size": r["family_size"], "excludes zero (unadjusted)": r["excludes_zero"]})
        else:
            row["excludes zero (unadjusted)"] = r.get("excludes_zero")
        out.append(row)
    return pa.Table.from_pylist(out)


def _columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in ("scheme", "reps", "seed", "analysis_order")]


def _sections(summary: pa.Table, contrasts: pa.Table | None):
    """(title, table, note) of each non-empty table of the report."""
    shown = [("Authority gaps", _readable(summary), None)]
    if contrasts is not None and contrasts.num_rows:
        shown.append(("Paired contrasts", contrast_rows(contrasts), CONTRAST_NOTE))
    return [(title, table, note) for title, table, note in shown if table.num_rows]


def markdown_report(summary: pa.Table, contrasts: pa.Table | None, provenance: str) -> str:
    lines = ["# AuthEval lake: authority-preserving evaluation", "", provenance, ""]
    for title, table, note in _sections(summary, contrasts):
        cols = _columns(table)
        lines += [f"## {title}", ""] + ([note, ""] if note else [])
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in table.to_pylist()]
        lines.append("")
    lines += ["![forest plot](forest_plot.png)", ""]
    return "\n".join(lines)


def html_report(summary: pa.Table, contrasts: pa.Table | None, provenance: str, png: bytes) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>AuthEval lake report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}"
        "td:first-child,td:nth-child(2){text-align:left}</style></head><body>",
        "<h1>AuthEval lake: authority-preserving evaluation</h1>",
        f"<p>{html.escape(provenance)}</p>",
    ]
    for title, table, note in _sections(summary, contrasts):
        cols = _columns(table)
        parts.append(f"<h2>{title}</h2>" + (f"<p>{html.escape(note)}</p>" if note else "") + "<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
        for r in table.to_pylist():
            parts.append("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in cols) + "</tr>")
        parts.append("</table>")
    parts.append(f"<h2>Forest plot</h2><img alt='forest plot' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def trend_plot_rows(trend: pa.Table) -> list[dict]:
    """The image-weighted Delta rows of a trend in plot order: 'all' (or, with several pools,
    'all (<pool>)') first, then the periods."""
    rows = [r for r in trend.to_pylist() if r["metric"] == "Delta_authority" and r["unit"] == "image_weighted"]
    rows.sort(key=lambda r: (not _is_all_to_date(r), r["period"]))
    return rows


def _is_all_to_date(row: dict) -> bool:
    return row["period"].split(" (")[0] == "all"


def trend_plot_png(trend: pa.Table) -> bytes:
    """Delta_authority (image-weighted) with its interval per period, 'all' first, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = trend_plot_rows(trend)
    fig, ax = plt.subplots(figsize=(max(4, 1.1 * len(rows) + 2), 3.6), dpi=110)
    for x, r in enumerate(rows):
        if r["estimate"] is None:
            ax.annotate("not recoverable", (x, 0), ha="center", fontsize=7, color="grey")
            continue
        colour = "#d62728" if _is_all_to_date(r) else "#1f77b4"
        ax.plot([x, x], [r["ci_lower"], r["ci_upper"]], color=colour, lw=2)
        ax.plot([x], [r["estimate"]], "o", color=colour)
    ax.axhline(0.0, color="grey", lw=1, ls="--")
    ax.set_xticks(range(len(rows)), [r["period"] for r in rows], rotation=30, fontsize=8)
    ax.set_ylabel("Delta = J_auth - J")
    ax.set_title("Authority gap over time (95% whole-cluster bootstrap)")
    return _png(fig)
