"""The report's plots as PNG bytes: the forest plot per study group, the trend of the authority gap and
the monitor's per-site confidence sequences; matplotlib is imported inside each function, so the
package imports without the `lake` extra.
"""

from __future__ import annotations

import io

import pyarrow as pa

from autheval.reporting.report.words import METRIC_WORDS

UNITS = (("image", "image-weighted"), ("cluster", "cluster-equal"))


POOLED = "all"  # a trend or monitor row's site or model version pooled over every one
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
    'all (<pool>)') first, then the periods; of a trend per site and model version, the rows pooled over
    both (site and model_version 'all') only."""
    rows = [
        r
        for r in trend.to_pylist()
        if r["metric"] == "Delta_authority"
        and r["unit"] == "image_weighted"
        and r.get("site", POOLED) == POOLED
        and r.get("model_version", POOLED) == POOLED
    ]
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
    """The monitor's rows as the per-series plot reads them (sql/reports/report_monitor_series.sql): every
    site x model version x mechanism the monitor watches, look by look."""
    from warehouse.sql import connect, rows

    con = connect()
    con.register("monitor", monitor)
    return rows(con, "reports/report_monitor_series")


# A picture is at most this wide (pixels): panels wrap into rows rather than widen the figure, and at most
# MAX_PANEL_ROWS rows of panels are drawn (series that alert first; the report's tables list every series).
MAX_PLOT_WIDTH_PX = 2400
MAX_PANEL_ROWS = 24
MONITOR_PANEL_INCHES = (5.6, 2.7)
MONITOR_DPI = 100
STATUS_MARKS = {  # each look's status: marker, colour, size (alerts large and red)
    "pass": ("o", "#2ca02c", 4),
    "insufficient": ("o", "#7f7f7f", 4),
    "alert": ("X", "#d62728", 10),
}


def _series_key(row: dict) -> tuple:
    return (row["site"], row.get("model_version", "all"), row.get("mechanism"))


def _series_name(key: tuple, mechanisms: int) -> str:
    site, version, mechanism = key
    name = f"{'all sites' if site == 'all' else site} / {'all versions' if version == 'all' else version}"
    return f"{name} / {mechanism}" if mechanisms > 1 and mechanism is not None else name


def monitor_panels(series: list[dict]) -> tuple[list[tuple[tuple, tuple]], int, int, int]:
    """The panels monitor_plot_png draws: ([(series key, rule)], columns, panel rows, series left out). One
    panel per site x model version (x mechanism) x rule in the order of `series`; a series' rules side by
    side, as many series per row as fit MAX_PLOT_WIDTH_PX; beyond MAX_PANEL_ROWS rows the series without
    an alert are left out first."""
    keys = list(dict.fromkeys(_series_key(r) for r in series))
    rules = list(dict.fromkeys((r["metric"], r["unit"], r["lower"], r["upper"]) for r in series))
    max_columns = max(1, int(MAX_PLOT_WIDTH_PX // (MONITOR_PANEL_INCHES[0] * MONITOR_DPI)))
    columns = (max_columns // len(rules)) * len(rules) if len(rules) <= max_columns else max_columns
    per_series = -(-len(rules) // columns)  # panel rows one series takes when its rules do not fit one row
    per_row = max(1, columns // len(rules))  # series per panel row
    room = MAX_PANEL_ROWS * per_row if per_series == 1 else MAX_PANEL_ROWS // per_series  # series drawn
    left_out = 0
    if len(keys) > room:
        alerting = {_series_key(r) for r in series if r["status"] == "alert"}
        kept = set([k for k in keys if k in alerting][:room])
        kept |= set([k for k in keys if k not in kept][: room - len(kept)])
        left_out = len(keys) - len(kept)
        keys = [k for k in keys if k in kept]
    panels = [(key, rule) for key in keys for rule in rules]
    if per_series > 1:  # a series starts a row of its own
        rows = per_series * len(keys)
    else:
        columns = min(columns, len(panels))
        rows = -(-len(panels) // columns)
    return panels, columns, rows, left_out


def monitor_plot_png(series: list[dict]) -> bytes:
    """One panel per site x model version (every site and every version pooled: 'all') x rule, wrapped into
    rows so the picture is at most MAX_PLOT_WIDTH_PX wide: the confidence sequence as a band, the
    fixed-sample interval and the estimate per look, each look's status marked (alerts as large red
    crosses, the panel framed red), the protocol's bounds as lines; the unit on each axis. `series`:
    sql/reports/report_monitor_series.sql's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels, columns, n_rows, left_out = monitor_panels(series)
    mechanisms = len({r.get("mechanism") for r in series})
    width, height = MONITOR_PANEL_INCHES
    fig, axes = plt.subplots(
        n_rows, columns, figsize=(width * columns, height * n_rows + 0.5), dpi=MONITOR_DPI, squeeze=False
    )
    rules = list(dict.fromkeys(rule for _, rule in panels))
    if len(rules) > columns:  # each series starts its own row
        per_series = -(-len(rules) // columns)
        slots = [
            (k // len(rules) * per_series + k % len(rules) // columns, k % len(rules) % columns)
            for k in range(len(panels))
        ]
    else:
        slots = [(k // columns, k % columns) for k in range(len(panels))]
    by_panel: dict[tuple, list[dict]] = {}
    for r in series:
        by_panel.setdefault((_series_key(r), (r["metric"], r["unit"], r["lower"], r["upper"])), []).append(r)
    used = set()
    for k, ((key, rule), (i, j)) in enumerate(zip(panels, slots)):
        used.add((i, j))
        looks = sorted(by_panel.get((key, rule), []), key=lambda r: r["look"])
        if not looks:
            axes[i, j].set_axis_off()
            continue
        _monitor_panel(axes[i, j], _series_name(key, mechanisms), rule, looks, legend=k == 0)
    for i in range(n_rows):
        for j in range(columns):
            if (i, j) not in used:
                axes[i, j].set_axis_off()
    if left_out:
        fig.suptitle(
            f"{left_out} more site x model version series without an alert are not drawn: the report's tables "
            "list every series",
            fontsize=9,
        )
    return _png(fig)


def _monitor_panel(ax, name: str, rule: tuple, looks: list[dict], legend: bool) -> None:
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
    if len(looks) == 1:  # one look: the sequence as a bar (a band needs two)
        ax.plot([0, 0], [values("cs_lower")[0], values("cs_upper")[0]], color="#1f77b4", alpha=0.25, lw=10)
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
    ax.plot(x, estimate, "-", color="#1f77b4", lw=1, label="estimate to date")
    for status, (marker, colour, size) in STATUS_MARKS.items():  # each look's status on its estimate
        at = np.array([r["status"] == status for r in looks])
        if at.any():
            ax.plot(x[at], estimate[at], marker, color=colour, ms=size, ls="none", label=f"look: {status}", zorder=3)
    latest = looks[-1]["status"]
    if any(r["status"] == "alert" for r in looks):
        for spine in ax.spines.values():
            spine.set_color("#d62728")
            spine.set_linewidth(2)
    for bound in (lower, upper):
        if bound is not None:
            ax.axhline(bound, color="#d62728", lw=1, ls="--", label="protocol bound")
    step = max(1, len(looks) // 8)
    ax.set_xticks(x[::step], [_mathtext_safe(str(r["period"])) for r in looks][::step], fontsize=7, rotation=30)
    ax.set_ylabel(_mathtext_safe(f"{AXIS_WORDS.get(metric, metric)}\n({unit.replace('_', '-')})"), fontsize=7)
    ax.set_title(
        _mathtext_safe(
            f"{name}: {METRIC_WORDS.get(metric, metric)} ({unit.replace('_', '-')}), latest "
            + ("ALERT" if latest == "alert" else latest)
        ),
        fontsize=9,
        loc="left",
        color="#d62728" if latest == "alert" else "black",
    )
    if legend:  # every status explained, also one this panel does not show
        from matplotlib.lines import Line2D

        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        for status, (marker, colour, size) in STATUS_MARKS.items():
            unique.setdefault(f"look: {status}", Line2D([], [], marker=marker, color=colour, ms=size, ls="none"))
        ax.legend(unique.values(), unique.keys(), fontsize=6, loc="best")


def trend_plot_png(trend: pa.Table, monitor: pa.Table | None = None) -> bytes:
    """reports/trend.png as PNG bytes: with a `monitor` table that has rows, one panel per site x model
    version x rule the monitor watches (monitor_plot_png: the confidence sequence band, the fixed-sample
    interval, each look's status, the protocol's bounds, the unit on the axis); else Delta_authority
    (image-weighted) with its interval per period of `trend` (pooled over sites and versions), 'all'
    first. Either is at most MAX_PLOT_WIDTH_PX wide."""
    if monitor is not None and monitor.num_rows:
        series = monitor_plot_rows(monitor)
        if series:
            return monitor_plot_png(series)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = trend_plot_rows(trend)
    dpi = 110  # at most MAX_PLOT_WIDTH_PX wide: many periods sit closer together, every tick still named
    fig, ax = plt.subplots(figsize=(min(max(4, 1.1 * len(rows) + 2), MAX_PLOT_WIDTH_PX / dpi), 3.6), dpi=dpi)
    for x, r in enumerate(rows):
        if r["estimate"] is None:
            ax.annotate("not recoverable", (x, 0), ha="center", fontsize=7, color="grey")
            continue
        colour = "#d62728" if _is_all_to_date(r) else "#1f77b4"
        ax.plot([x, x], [r["ci_lower"], r["ci_upper"]], color=colour, lw=2)
        ax.plot([x], [r["estimate"]], "o", color=colour)
    ax.axhline(0.0, color="grey", lw=1, ls="--")
    step = max(1, -(-len(rows) // 60))  # at most 60 period labels
    ax.set_xticks(
        range(0, len(rows), step), [_mathtext_safe(r["period"]) for r in rows][::step], rotation=30, fontsize=8
    )
    ax.set_ylabel("Delta = J_auth - J")
    ax.set_title("Authority gap over time (95% whole-cluster bootstrap)")
    return _png(fig)
