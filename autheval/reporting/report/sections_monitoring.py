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
    named = _named_alerts(inputs)
    in_force = {_series_of(a): a["alert_id"] for a in named if a["in_force"]}
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
                        "alert id": in_force.get(_series_of(r)),
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
                    "alert id",
                ],
                numbers=True,
            )
        )
    else:
        blocks.append(Text(["No site x model version x rule alerts at its latest look."]))
    blocks += _alert_record(named, inputs.rows("monitor_acknowledgements"))
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


# --- alerts and what was done about them --------------------------------------------------------------

ACK_COMMAND = "autheval monitor ack --lake DIR --alert ID --by NAME --action acknowledged|reviewed --note TEXT"
SERIES_KEYS = ("site", "model_version", "mechanism", "metric", "unit", "lower", "upper")


def _series_of(row: dict) -> tuple:
    return tuple(row.get(k) for k in SERIES_KEYS)


def _named_alerts(inputs: ReportInputs) -> list[dict]:
    """Every alert of the monitor table (sql/recurring/monitor_alert_episodes.sql), each with the id the
    notifier, `monitor status` and `monitor ack` name it by."""
    rows = inputs.rows("monitor_alerts")
    if not rows:
        return []
    from autheval.monitoring.acknowledgements import named_alerts

    return named_alerts(rows)


def _alert_record(named: list[dict], acks: list[dict]) -> list:
    """The heading and table of every alert (in force or ended) with what was done about it, in the order
    recorded; an acknowledged alert the monitor table no longer shows (later data or another protocol
    recomputed it) keeps its rows, from the record."""
    from autheval.monitoring.acknowledgements import acknowledgement_words

    blocks: list = [Heading("Alerts and what was done about them")]
    done: dict[str, list[dict]] = {}
    for ack in acks:
        done.setdefault(ack["alert_id"], []).append(ack)
    rows = [
        {
            **a,
            "alert id": a["alert_id"],
            "rule": _rule_words(a),
            "bounds": _bounds_words(a),
            "since": f"look {a['first_look']} ({a['first_period']})",
            "state": "in force" if a["in_force"] else f"ended after look {a['last_look']} ({a['last_period']})",
            "what was done": acknowledgement_words(done.get(a["alert_id"], [])),
        }
        for a in named
    ]
    shown = {a["alert_id"] for a in named}
    for alert_id, record in done.items():
        if alert_id not in shown:
            first = record[0]
            rows.append(
                {
                    **first,
                    "alert id": alert_id,
                    "rule": _rule_words(first),
                    "bounds": _bounds_words(first),
                    "since": f"look {first['first_look']} ({first['first_period']})",
                    "state": "no longer in the monitor table (recomputed)",
                    "what was done": acknowledgement_words(record),
                }
            )
    if not rows:
        blocks.append(Text(["No look has alerted, so there is nothing to acknowledge."]))
        return blocks
    unacknowledged = sum(r["what was done"] == "not acknowledged" for r in rows)
    blocks.append(
        Text(
            [
                ("b", f"{len(rows)} alert(s), {unacknowledged} not acknowledged."),
                " Each alert is a run of alerting looks of one site x model version x rule, named by its id; what "
                "was done about it is recorded in the lake's append-only monitor_acknowledgements table by ",
                ("code", ACK_COMMAND),
                " (each row: the action, who, when in UTC, the note, the lake run that committed it).",
            ]
        )
    )
    blocks.append(
        _rows_table(rows, ["alert id", "site", "model_version", "rule", "bounds", "since", "state", "what was done"])
    )
    return blocks


# --- the acceptance criteria --------------------------------------------------------------------------

CRITERION_KEYS = (
    "protocol_version",
    "protocol_sha256",
    "metric",
    "unit",
    "lower",
    "upper",
    "alpha",
    "multiplicity",
    "min_clusters",
    "horizon_clusters",
)
MEASURE_WORDS = {
    "Delta_authority": "the authority gap Delta = J_auth - J (what the local authority's selection changed in "
    "the declared local utility)",
    "intervention_rate": "the intervention rate p (the share of cases where the local authority changed the proposal)",
    "delta": "delta (the local-utility change per changed case)",
    "J": "J (the declared local utility of the proposals)",
    "J_auth": "J_auth (the declared local utility after the local authority's selection)",
}
UNIT_WORDS = {
    "image_weighted": "image-weighted (every image counts once)",
    "cluster_equal": "cluster-equal (every lesion cluster counts once)",
}


def _bound_words(row: dict) -> str:
    lower, upper = row.get("lower"), row.get("upper")
    if lower is not None and upper is not None:
        return f"between {lower:g} and {upper:g}"
    return f"at least {lower:g}" if lower is not None else f"at most {upper:g}"


def _series_words(series: list[tuple[str, str]]) -> str:
    ordered = sorted(series, key=lambda s: (s[0] == "all", s[0], s[1] == "all", s[1]))
    return ", ".join(f"{site} / {version}" for site, version in ordered)


def _criteria(rows: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(the criterion's settings, its rows: one per site x model version) in the rows' order."""
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[k] for k in CRITERION_KEYS), []).append(row)
    return [(dict(zip(CRITERION_KEYS, key, strict=True)), series) for key, series in grouped.items()]


def _error_words(settings: dict, series: list[dict]) -> str:
    families = sorted({r["family_size"] for r in series if r.get("family_size") is not None})
    family = (
        f"a family of {' / '.join(str(f) for f in families)} hypotheses"
        if families
        else "the hypotheses with data at each run"
    )
    correction = "no correction" if settings["multiplicity"] == "none" else f"{settings['multiplicity']} correction"
    return f"alpha {settings['alpha']:g}, the chance of any false alert over every look; {correction} over {family}"


def _fired_words(settings: dict, series: list[dict], alerts: list[dict]) -> str:
    where = {(r["site"], r["model_version"]) for r in series}
    fired = [
        a
        for a in alerts
        if (a["site"], a["model_version"]) in where
        and all(a[k] == settings[k] for k in ("metric", "unit", "lower", "upper", "protocol_sha256"))
    ]
    if fired:
        return "FIRED: " + "; ".join(
            f"{a['site']} / {a['model_version']} at look {a['first_look']} ({a['first_period']})"
            + (", in force" if a["in_force"] else f", ended after look {a['last_look']}")
            for a in fired
        )
    if any(r["alert_looks"] for r in series):  # the alerts part was not filled (an older lake)
        return "FIRED at " + _series_words([(r["site"], r["model_version"]) for r in series if r["alert_looks"]])
    decided = sum(r["decided_looks"] for r in series)
    total = sum(r["looks"] for r in series)
    if not decided:
        return f"held: no look alerted; none of {total} looks decided yet (too few clusters, or a bound overlapped)"
    if decided == total:
        return f"held: no look alerted (all {total} looks passed)"
    return f"held: no look alerted ({decided} of {total} looks passed, the rest not yet decided)"


def _labels(criteria: list[tuple[dict, list[dict]]]) -> list[str]:
    """C1, C2, ... one number per rule (metric, unit, bounds) of each protocol; a rule a site's override
    holds to other settings is the same number, marked: the settings of every site pooled ('all') are the
    protocol's own."""
    numbers: dict[tuple, int] = {}
    labels = []
    for settings, series in criteria:
        rule = tuple(settings[k] for k in ("protocol_sha256", "metric", "unit", "lower", "upper"))
        number = numbers.setdefault(rule, len(numbers) + 1)
        pooled = any(r["site"] == "all" for r in series)
        labels.append(f"C{number}" if pooled else f"C{number}, a site's override")
    return labels


def _criteria_section(inputs: ReportInputs) -> Section:
    """The protocol's acceptance criteria as pre-specified, in plain words (what is measured, where, the
    bound, the error rate and correction over the declared family, the minimum clusters, the looks), the
    protocol's SHA-256, and whether each criterion fired (where, from which look) or held."""
    if not inputs.has("monitor_criteria"):
        return _section("acceptance", [Text(["No protocol has been applied in this lake: " + MONITOR_ABSENT])])
    rows = inputs.rows("monitor_criteria")
    if not rows:
        return _section("acceptance", [Text(["The monitor table has no rows: no criterion has been applied yet."])])
    criteria = _criteria(rows)
    alerts = _named_alerts(inputs)
    protocols = dict.fromkeys((s["protocol_version"], s["protocol_sha256"]) for s, _ in criteria)
    blocks: list = [
        Text(
            [
                "The acceptance criteria the deployment is held to, as its protocol declares them before any data are "
                "looked at (the way a predetermined change control plan states them): what is measured, at which "
                "sites and model versions, the bound, the error rate and its correction over the declared family, "
                "the clusters needed before any decision, and the looks. Each criterion is stated from the settings "
                "every monitor row carries, so it is the criterion as applied; the last column says whether it "
                "fired (a look's confidence sequence lay wholly outside the bound) or held."
            ]
        )
    ]
    for version, sha in protocols:
        blocks.append(Text([("b", "Protocol"), f" {version}, SHA-256 ", ("code", sha)]))
    if len(protocols) > 1:
        blocks.append(
            Text(
                ["The monitor table names more than one protocol: its rows were decided by different files."], "callout"
            )
        )
    table_rows = []
    for label, (settings, series) in zip(_labels(criteria), criteria, strict=True):
        periods = sorted({r["first_period"] for r in series} | {r["last_period"] for r in series})
        table_rows.append(
            {
                "criterion": label,
                "what is measured": f"{MEASURE_WORDS.get(settings['metric'], settings['metric'])}, "
                f"{UNIT_WORDS.get(settings['unit'], settings['unit'])}",
                "bound": _bound_words(settings),
                "for (site / model version)": _series_words([(r["site"], r["model_version"]) for r in series]),
                "error rate and correction": _error_words(settings, series),
                "minimum clusters": f"{settings['min_clusters']} lesion clusters to date before a pass or an alert",
                "looks": f"one per landed period, {max(r['looks'] for r in series)} so far ({periods[0]} to "
                f"{periods[-1]}); anytime-valid at every look, tightest at {settings['horizon_clusters']} clusters",
                "fired or held": _fired_words(settings, series, alerts),
            }
        )
    fired = sum(r["fired or held"].startswith("FIRED") for r in table_rows)
    blocks.append(
        Text([("b", f"{len(table_rows)} criteria as applied: {fired} fired, {len(table_rows) - fired} held.")])
    )
    blocks.append(_rows_table(table_rows, list(table_rows[0])))
    return _section("acceptance", blocks)
