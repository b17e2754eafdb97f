"""The monitoring sections: the trend of landed logs and the monitor's status, alerts, per-site plot
and case-mix shifts, with the empty state when nothing has landed; kept together because both read
what the landing folder and the monitor put in the lake.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.reporting.report.document import Heading, Image, ReportInputs, Section, Text
from autheval.reporting.report.plots import monitor_plot_png, trend_plot_png
from autheval.reporting.report.words import METRIC_WORDS, _absent, _cell, _rows_table, _section


def _trend_section(inputs: ReportInputs) -> Section:
    if not inputs.has("trend"):
        return _section(
            "trend",
            [
                Text(
                    [
                        "This lake has no trend table: nothing has been monitored. Role-separated "
                        "or full logs dropped in the landing folder are re-evaluated to date and per "
                        "period, with intervals, and reported here."
                    ]
                )
            ],
        )
    rows = inputs.rows("trend")
    if not rows:
        return _section("trend", [Text(["The trend table has no rows: no landed log yet."])])
    sited = "site" in rows[0] and "model_version" in rows[0]
    blocks: list = [
        Text(
            [
                "Each landed log is pooled by record level; 'all' is every log to date. A number a pool's "
                "record cannot support is reported as not recoverable with the reason."
                + (
                    " One row per site x model version (as the monitor watches them; 'all': pooled over every "
                    "site or version) x pool x period x unit x metric; the plot is the pool of every site and "
                    "version, the monitoring section's picture has a panel per site x model version."
                    if sited
                    else ""
                )
            ],
            "note",
        )
    ]
    blocks.append(
        _rows_table(
            [
                {
                    **r,
                    "estimate [95% CI]": _cell(r, pct=r["metric"] == "intervention_rate"),
                    "metric": METRIC_WORDS.get(r["metric"], r["metric"]),
                    "unit": r["unit"].replace("_", "-"),
                }
                for r in rows
            ],
            [
                *(("site", "model_version") if sited else ()),
                "pool",
                "period",
                "unit",
                "metric",
                "estimate [95% CI]",
                "n",
                "n_clusters",
                "status",
                "reason",
            ],
            numbers=True,
        )
    )
    gap_rows = [r for r in rows if r["metric"] == "Delta_authority" and r["unit"] == "image_weighted"]
    if gap_rows:
        blocks.append(Image("report_trend.png", _trend_png(rows), "the authority gap per period"))
    return _section("trend", blocks)


def _trend_png(rows: list[dict]) -> bytes:
    """The Trend section's picture: the rows pooled over every site and model version only (a trend per
    site x model version would otherwise draw each period once per series)."""
    from autheval.monitoring.landing import trend_plot_table

    return trend_plot_png(trend_plot_table(pa.Table.from_pylist(rows)))


MONITOR_ABSENT = (
    "Nothing is monitored in this lake yet. Declare an acceptance protocol (`autheval protocol show` "
    "prints the default; `autheval protocol check FILE` validates yours), drop each month's logs in "
    "<lake>/landing/ and run `autheval monitor run --lake DIR`: every site x model version x rule then "
    "gets a status here, look by look."
)


def _bounds_words(row: dict) -> str:
    lower, upper = row.get("lower"), row.get("upper")
    return f"[{'-inf' if lower is None else f'{lower:g}'}, {'inf' if upper is None else f'{upper:g}'}]"


def _band(row: dict, lower: str, upper: str) -> str:
    if row.get(lower) is None or row.get(upper) is None or row[lower] != row[lower]:
        return "NA"
    return f"[{row[lower]:+.4f}, {row[upper]:+.4f}]"


def _rule_words(row: dict) -> str:
    return f"{METRIC_WORDS.get(row['metric'], row['metric'])} ({row['unit'].replace('_', '-')})"


def _alerting_series(series: list[dict]) -> str:
    """The series whose latest look alerts, or that alerted at a look, as 'site / model version (rule)'."""
    named = dict.fromkeys(
        f"{r['site']} / {r.get('model_version', 'all')} ({_rule_words(r)})" for r in series if r["status"] == "alert"
    )
    return ", ".join(named)


def _monitoring_section(inputs: ReportInputs) -> Section:
    """The monitor's status table (latest look of every site x model version x rule), the alerts, the
    per-site picture and the case-mix shifts; the empty state when nothing has landed."""
    if not inputs.has("monitor_latest"):
        why = (
            "This lake has no monitor table. "
            if "monitor" not in inputs.columns
            else "This lake's monitor table lacks columns the report reads (an older lake). "
        )
        return _section("monitoring", [Text([why + MONITOR_ABSENT])])
    latest = inputs.rows("monitor_latest")
    if not latest:
        return _section("monitoring", [Text(["The monitor table has no rows: no landed log yet. " + MONITOR_ABSENT])])
    alerts = [r for r in latest if r["status"] == "alert"]
    counts = {s: sum(r["status"] == s for r in latest) for s in ("alert", "pass", "insufficient")}
    blocks: list = [
        Text(
            [
                "Each site x model version (and every site pooled: 'all') is watched look by look against the "
                "declared protocol's rules with an anytime-valid confidence sequence (valid at every look at once, "
                "lesion clusters as units), drawn at the level the multiplicity correction gives; the fixed-sample "
                "bootstrap interval is beside it for reference only (acting on it every month would alarm falsely). ",
                ("b", f"{counts['alert']} alert, {counts['pass']} pass, {counts['insufficient']} insufficient"),
                f" at the latest look of {len(latest)} site x model version x rule series.",
            ],
            "note",
        )
    ]
    blocks.append(Heading("Alerts"))
    if alerts:
        blocks.append(
            Text(
                [
                    ("b", f"{len(alerts)} series alert"),
                    ": the confidence sequence lies wholly outside the protocol's bounds at the latest look.",
                ],
                "callout",
            )
        )
        blocks.append(
            _rows_table(
                [
                    {
                        **r,
                        "rule": _rule_words(r),
                        "bounds": _bounds_words(r),
                        "confidence sequence": _band(r, "cs_lower", "cs_upper"),
                    }
                    for r in alerts
                ],
                [
                    "site",
                    "model_version",
                    "rule",
                    "bounds",
                    "period",
                    "n_clusters",
                    "estimate",
                    "confidence sequence",
                    "alert_since",
                    "reason",
                ],
                numbers=True,
            )
        )
    else:
        blocks.append(Text(["No site x model version x rule alerts at its latest look."]))
    blocks.append(Heading("Status at the latest look"))
    blocks.append(
        _rows_table(
            [
                {
                    **r,
                    "rule": _rule_words(r),
                    "bounds": _bounds_words(r),
                    "confidence sequence": _band(r, "cs_lower", "cs_upper"),
                    "fixed-sample 95% CI": _band(r, "ci_lower", "ci_upper"),
                    "level": r.get("alpha_adjusted"),
                }
                for r in latest
            ],
            [
                "site",
                "model_version",
                "rule",
                "bounds",
                "period",
                "look",
                "n_clusters",
                "estimate",
                "confidence sequence",
                "fixed-sample 95% CI",
                "level",
                "status",
            ],
            numbers=True,
        )
    )
    series = inputs.rows("monitor_series")
    if series:
        alerting = _alerting_series(series)
        blocks.append(
            Image(
                "report_monitor.png",
                monitor_plot_png(series),
                "each site's confidence sequence per model version, fixed-sample interval, each look's status "
                "and the protocol's bounds per look" + (f"; alert marked at {alerting}" if alerting else ""),
            )
        )
    blocks.append(Heading("Case mix"))
    mix = inputs.rows("monitor_case_mix")
    if not inputs.has("monitor_case_mix"):
        blocks.append(_absent("monitor_case_mix"))
    elif not mix:
        blocks.append(Text(["The case-mix table has no rows."]))
    else:
        shifted = [r for r in mix if r["shifted"]]
        blocks.append(
            Text(
                [
                    ("b", f"{len(shifted)} of {len(mix)} site x dimension case mixes have shifted"),
                    " against the site's baseline at the latest period (a sequential multinomial test, "
                    "anytime-valid). A shifted case mix changes what the gap means: read the gap of that "
                    "site beside it.",
                ]
            )
        )
        if shifted:
            blocks.append(Heading("Case-mix shifts"))
            blocks.append(
                _rows_table(
                    shifted, ["site", "dimension", "period", "shifted_since", "p_value", "shares"], numbers=True
                )
            )
        blocks.append(
            _rows_table(
                mix,
                ["site", "dimension", "period", "shifted", "p_value", "shares", "reason"],
                collapsed=f"Every site's case mix at its latest period ({len(mix)} rows)",
            )
        )
    return _section("monitoring", blocks)
