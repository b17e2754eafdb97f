"""The report's plots as PNG bytes: the forest plot per study group, the trend of the authority gap and
the monitor's per-site confidence sequences; matplotlib is imported inside each function, so the
package imports without the `lake` extra.
"""

from __future__ import annotations

import io

import pyarrow as pa

from autheval.reporting.report.words import METRIC_WORDS

UNITS = (("image", "image-weighted"), ("cluster", "cluster-equal"))


MAX_PLOTTED_CONTRAST_ROWS = 12  # more paired contrasts in a group than this are left to the report's table


def _mathtext_safe(label: str) -> str:
    """A label matplotlib draws as written ('$' would start mathtext and can fail to parse)."""
    return label.replace("$", r"\$")


def _forest_groups(summary: pa.Table, contrasts: pa.Table | None) -> list[tuple[str, list[dict], list[dict]]]:
    """(group, summary rows, contrast rows) per study group in table order (one per regime in a cohort
    lake; 'regimes' and 'mechanisms' in the reference lake). A contrast joins its first arm's group,
    else its family's leading name; unplaced contrasts go to the only group, or a group of their own."""
    rows = summary.to_pylist()
    groups: dict[str, tuple[list, list]] = {}
    for row in rows:
        groups.setdefault(str(row.get("study", "")), ([], []))[0].append(row)
    study_of = {row["analysis"]: str(row.get("study", "")) for row in rows}
    stray: list[dict] = []
    for row in contrasts.to_pylist() if contrasts is not None else []:
        arm = str(row["contrast"]).split(" minus ")[0]
        family = str(row.get("family") or "").rsplit(" / ", 1)[0]
        group = study_of.get(arm) or (family if family in groups else None)
        if group is None and len(groups) == 1:
            group = next(iter(groups))
        (groups[group][1] if group is not None else stray).append(row)
    out = [(name, s, c) for name, (s, c) in groups.items()]
    if stray:
        out.append(("other contrasts", [], stray))
    return out


def forest_plot_png(summary: pa.Table, contrasts: pa.Table | None = None) -> bytes:
    """Delta_authority with its interval per analysis and unit, one panel per study group (a group's
    contrasts in its panel when there are at most MAX_PLOTTED_CONTRAST_ROWS of them), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for group, rows, contrast_rows_ in _forest_groups(summary, contrasts):
        suffix = f" / {group}"  # a cohort's analyses are '<mechanism> / <regime>': the panel names the regime
        short = (
            (lambda name, suffix=suffix: name[: -len(suffix)])
            if rows and all(str(r["analysis"]).endswith(suffix) for r in rows)
            else (lambda name, suffix=suffix: name)  # one signature for both: mypy cannot join two
        )
        labels, points, lows, highs, colours = [], [], [], [], []
        for row in rows:
            for key, unit in UNITS:
                labels.append(f"{short(str(row['analysis']))} ({unit})")
                points.append(row[f"Delta_authority_{key}"])
                lows.append(row[f"Delta_authority_{key}_ci_lower"])
                highs.append(row[f"Delta_authority_{key}_ci_upper"])
                colours.append("#1f77b4" if key == "image" else "#ff7f0e")
        if len(contrast_rows_) > MAX_PLOTTED_CONTRAST_ROWS:  # every pair of many mechanisms: the table has them
            contrast_rows_ = []
        for row in contrast_rows_:
            arms = " minus ".join(short(arm) for arm in str(row["contrast"]).split(" minus "))
            labels.append(f"contrast: {arms} ({row['unit'].replace('_', '-')})")
            points.append(row["difference"])
            lows.append(row["ci_lower"])
            highs.append(row["ci_upper"])
            colours.append("#2ca02c")
        if labels:
            panels.append((group, labels, points, lows, highs, colours))
    if not panels:
        panels = [("no analyses", ["none"], [None], [None], [None], ["grey"])]
    heights = [0.42 * len(p[1]) + 0.9 for p in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, sum(heights) + 0.6), dpi=110, squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    for ax, (group, labels, points, lows, highs, colours) in zip(axes[:, 0], panels):
        y = list(range(len(labels)))[::-1]
        for yi, p, lo, hi, c in zip(y, points, lows, highs, colours):
            if p is None:
                continue
            if lo is not None and hi is not None:
                ax.plot([lo, hi], [yi, yi], color=c, lw=2)
            ax.plot([p], [yi], "o", color=c)
        ax.axvline(0.0, color="grey", lw=1, ls="--")
        ax.set_yticks(y, [_mathtext_safe(label) for label in labels], fontsize=8)
        ax.set_ylim(-0.7, len(labels) - 0.3)
        ax.set_title(_mathtext_safe(f"{group}: authority gap Delta = J_auth - J"), fontsize=10, loc="left")
    axes[-1, 0].set_xlabel(
        "local-utility points per image, 95% whole-cluster bootstrap interval\n"
        "blue: image-weighted, orange: cluster-equal, green: paired contrasts",
        fontsize=8,
    )
    return _png(fig)


def _png(fig) -> bytes:
    """A finished figure as PNG bytes (no software tag, so the same figure gives the same bytes)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def trend_plot_rows(trend: pa.Table) -> list[dict]:
    """The image-weighted Delta rows of a trend in plot order: 'all' (or, with several pools,
    'all (<pool>)') first, then the periods."""
    rows = [r for r in trend.to_pylist() if r["metric"] == "Delta_authority" and r["unit"] == "image_weighted"]
    rows.sort(key=lambda r: (not _is_all_to_date(r), r["period"]))
    return rows


def _is_all_to_date(row: dict) -> bool:
    return row["period"].split(" (")[0] == "all"


AXIS_WORDS = {
    "Delta_authority": "Delta = J_auth - J, local-utility points per image",
    "intervention_rate": "p, share of images the review changed",
    "delta": "delta, local-utility points per changed image",
    "J": "J, local utility of the executed action per image",
    "J_auth": "J_auth, local utility of the proposal per image",
}


def monitor_plot_rows(monitor: pa.Table) -> list[dict]:
    """The monitor's rows as the per-site plot reads them (sql/reports/report_monitor_series.sql)."""
    from warehouse.sql import connect, rows

    con = connect()
    con.register("monitor", monitor)
    return rows(con, "reports/report_monitor_series")


def monitor_plot_png(series: list[dict]) -> bytes:
    """One row of panels per site (every site pooled last), one panel per rule: the confidence sequence
    as a band, the fixed-sample interval and the estimate per look, the protocol's bounds as lines, the
    alerting looks marked; the unit on each axis. `series`: sql/reports/report_monitor_series.sql's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(r["site"] for r in series))
    rules = list(dict.fromkeys((r["metric"], r["unit"], r["lower"], r["upper"]) for r in series))
    fig, axes = plt.subplots(
        len(sites), len(rules), figsize=(5.6 * len(rules), 2.7 * len(sites) + 0.5), dpi=100, squeeze=False
    )
    for i, site in enumerate(sites):
        for j, rule in enumerate(rules):
            ax = axes[i, j]
            looks = sorted(
                (r for r in series if r["site"] == site and (r["metric"], r["unit"], r["lower"], r["upper"]) == rule),
                key=lambda r: r["look"],
            )
            if not looks:
                ax.set_axis_off()
                continue
            _monitor_panel(ax, site, rule, looks, legend=i == 0 and j == 0)
    return _png(fig)


def _monitor_panel(ax, site: str, rule: tuple, looks: list[dict], legend: bool) -> None:
    import numpy as np

    metric, unit, lower, upper = rule
    x = np.arange(len(looks))

    def values(key):
        return np.array([np.nan if r[key] is None else r[key] for r in looks], float)

    estimate, lo, hi = values("estimate"), values("ci_lower"), values("ci_upper")
    ax.fill_between(
        x,
        values("cs_lower"),
        values("cs_upper"),
        color="#1f77b4",
        alpha=0.25,
        lw=0,
        label="confidence sequence (anytime-valid)",
    )
    known = ~np.isnan(lo) & ~np.isnan(hi) & ~np.isnan(estimate)
    if known.any():
        ax.errorbar(
            x[known],
            estimate[known],
            yerr=[estimate[known] - lo[known], hi[known] - estimate[known]],
            fmt="none",
            ecolor="#ff7f0e",
            elinewidth=1.2,
            capsize=2,
            label="fixed-sample 95% interval",
        )
    ax.plot(x, estimate, "o-", color="#1f77b4", ms=3, lw=1, label="estimate to date")
    alert = np.array([r["status"] == "alert" for r in looks])
    if alert.any():
        ax.plot(x[alert], estimate[alert], "X", color="#d62728", ms=8, label="alert")
    for bound in (lower, upper):
        if bound is not None:
            ax.axhline(bound, color="#d62728", lw=1, ls="--", label="protocol bound")
    step = max(1, len(looks) // 8)
    ax.set_xticks(x[::step], [_mathtext_safe(str(r["period"])) for r in looks][::step], fontsize=7, rotation=30)
    ax.set_ylabel(_mathtext_safe(f"{AXIS_WORDS.get(metric, metric)}\n({unit.replace('_', '-')})"), fontsize=7)
    ax.set_title(
        _mathtext_safe(
            f"{'all sites' if site == 'all' else site}: {METRIC_WORDS.get(metric, metric)} "
            f"({unit.replace('_', '-')}), latest {looks[-1]['status']}"
        ),
        fontsize=9,
        loc="left",
    )
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        ax.legend(unique.values(), unique.keys(), fontsize=6, loc="best")


def trend_plot_png(trend: pa.Table, monitor: pa.Table | None = None) -> bytes:
    """reports/trend.png as PNG bytes: with a `monitor` table that has rows, one panel per site and
    rule (monitor_plot_png: the confidence sequence band, the fixed-sample interval, the protocol's
    bounds, the unit on the axis); else Delta_authority (image-weighted) with its interval per period of
    `trend`, 'all' first."""
    if monitor is not None and monitor.num_rows:
        series = monitor_plot_rows(monitor)
        if series:
            return monitor_plot_png(series)

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
    ax.set_xticks(range(len(rows)), [_mathtext_safe(r["period"]) for r in rows], rotation=30, fontsize=8)
    ax.set_ylabel("Delta = J_auth - J")
    ax.set_title("Authority gap over time (95% whole-cluster bootstrap)")
    return _png(fig)
