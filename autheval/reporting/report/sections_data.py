"""The data sections: subgroups and fairness, and the provenance of the report, its run, rules,
analyses, mechanisms, models and input files; the sections that list what the lake holds row by row.
"""

from __future__ import annotations

from autheval import __version__
from autheval.reporting.report.document import Heading, ReportInputs, Section, Table, Text
from autheval.reporting.report.queries import ANALYSIS_STAMP, PROVENANCE_FIELDS
from autheval.reporting.report.words import (
    ESTIMATED_GROUPINGS,
    ESTIMATED_NOTE,
    _absent,
    _cell,
    _grouping,
    _model_names,
    _num,
    _pct,
    _rows_table,
    _schemes,
    _section,
)


def _labelled(rows: list[dict], key: str = "grouping") -> list[dict]:
    """Rows with their grouping as the report shows it (an estimated grouping says so)."""
    return [{**r, key: _grouping(r[key])} for r in rows]


def _estimated_note(*row_lists: list[dict]) -> list[Text]:
    """The note on estimated groupings, where one appears."""
    shown = set(ESTIMATED_GROUPINGS.values())
    return (
        [Text([ESTIMATED_NOTE], "note")] if any(r.get("grouping") in shown for rows in row_lists for r in rows) else []
    )


def _ratio(row: dict, key: str) -> str:
    """A fairness ratio with its interval where the table carries one ("ratio [lo, hi]"), or "not estimable"
    where the table says why it has no number (its best group's accuracy has an interval that includes 0)."""
    value = _num(row.get(key), 3, False)
    lower, upper = row.get(f"{key}_ci_lower"), row.get(f"{key}_ci_upper")
    if f"{key}_ci_lower" not in row:
        return value
    if row.get(key) is None and f"{key} not estimable" in (row.get("reason") or ""):
        return "not estimable"
    return f"{value} [{_num(lower, 3, False)}, {_num(upper, 3, False)}]"


def _fairness_note(rows: list[dict], intervals: bool) -> str:
    """How the fairness ratios were made: the note above the table."""
    head = (
        "Per analysis and grouping: the worst group and the lowest to highest group accuracy "
        "(exact action level) of the proposal and of the selected action; fairness is their "
        "ratio (1 = equally accurate in every group)"
    )
    if not intervals:
        return (
            head + ". This lake's fairness table carries no interval for the ratios: read them as "
            "point estimates, which with few clusters per group can differ from 1 by chance alone."
        )
    first = rows[0]
    return (
        head + f", with its 95% whole-cluster bootstrap interval ({first['interval_method']}, scheme "
        f"{first['scheme']}, seed {first['seed']}, {first['reps']} replicates, {first['unit']} accuracy): the "
        "replicates of the analysis's own estimates, the worst and the best group of the point held fixed in "
        "each. A ratio whose best group's accuracy has an interval that includes 0 is not estimable."
    )


def _subgroups_section(inputs: ReportInputs) -> Section:
    blocks: list = []
    if not inputs.has("subgroups"):
        blocks.append(
            _absent("subgroups")
            if "subgroups" not in inputs.columns
            else Text(["This lake's subgroups table lacks columns the report reads (the adjusted flag among them)."])
        )
    elif not inputs.rows("subgroups"):
        blocks.append(
            Text(
                [
                    "The subgroups table has no rows: the evaluated records join no subgroup attributes "
                    "(sex, age, site, profile) in this lake."
                ]
            )
        )
    else:
        rows = _labelled(inputs.rows("subgroups"))
        blocks += _estimated_note(rows)
        gaps = [r for r in rows if r["estimable"]]
        small = [r for r in rows if not r["estimable"]]
        summary: dict[str, dict] = {}
        for r in rows:
            s = summary.setdefault(r["grouping"], {"groups": set(), "estimable": 0, "small": 0, "adj": 0, "raw": 0})
            s["groups"].add(r["group_value"])
            s["estimable" if r["estimable"] else "small"] += 1
            s["adj"] += bool(r.get("excludes_zero_adjusted"))
            s["raw"] += bool(r.get("excludes_zero"))
        flagged = [r for r in gaps if r.get("excludes_zero_adjusted")]
        blocks.append(
            Text(
                [
                    f"The authority gap (image-weighted) within each group of {len(summary)} grouping(s), per "
                    f"analysis: {len(gaps)} group estimates and {len(small)} groups too small to estimate. ",
                    ("b", f"{len(flagged)} group gaps exclude zero after the Holm adjustment"),
                    " over their family (every group of one analysis, unit and metric).",
                ]
            )
        )
        blocks.append(
            Table(
                [
                    "grouping",
                    "groups",
                    "group estimates",
                    "too small",
                    "exclude zero (Holm-adjusted)",
                    "exclude zero (unadjusted)",
                ],
                [[g, len(s["groups"]), s["estimable"], s["small"], s["adj"], s["raw"]] for g, s in summary.items()],
            )
        )
        if flagged:
            blocks.append(Heading("Group gaps that exclude zero after adjustment"))
            blocks.append(
                _rows_table(
                    [{**r, "Delta [95% CI]": _cell(r)} for r in flagged],
                    [
                        "analysis",
                        "grouping",
                        "group_value",
                        "n_images",
                        "n_clusters",
                        "Delta [95% CI]",
                        "p_adjusted",
                        "q_value",
                        "family_size",
                    ],
                )
            )
        blocks.append(
            _rows_table(
                [{**r, "Delta [95% CI]": _cell(r)} for r in gaps],
                [
                    "analysis",
                    "grouping",
                    "group_value",
                    "n_images",
                    "n_clusters",
                    "accuracy_proposal",
                    "accuracy_selected",
                    "Delta [95% CI]",
                    "p_adjusted",
                    "excludes_zero_adjusted",
                ],
                collapsed=f"Every group's gap ({len(gaps)} rows)",
                numbers=True,
            )
        )
        if small:
            blocks.append(
                _rows_table(
                    small,
                    ["analysis", "grouping", "group_value", "n_images", "n_clusters", "reason"],
                    collapsed=f"Groups too small to estimate ({len(small)} rows)",
                )
            )
    blocks.append(Heading("Fairness"))
    rows = _rows_or_say(inputs, blocks, "fairness", "The fairness table has no rows.")
    if rows:
        rows = _labelled(rows)
        intervals = "fairness_proposal_ci_lower" in rows[0]
        blocks.append(Text([_fairness_note(rows, intervals)], "note"))
        unestimable = [r for r in rows if r.get("reason")]
        if intervals and unestimable:
            blocks.append(
                Text([" ".join(f"In {r['analysis']} by {r['grouping']}: {r['reason']}." for r in unestimable)])
            )
        if not inputs.has("subgroups"):
            blocks += _estimated_note(rows)
        for role in ("proposal", "selected"):
            known = [r for r in rows if r.get(f"fairness_{role}") is not None]
            if known:
                low = min(known, key=lambda r: r[f"fairness_{role}"])
                blocks.append(
                    Text(
                        [
                            f"Least fair for the {'proposal' if role == 'proposal' else 'selected action'}: ",
                            ("b", _ratio(low, f"fairness_{role}")),
                            f" in {low['analysis']} by {low['grouping']} (worst group {low[f'worst_group_{role}']}).",
                        ]
                    )
                )
        shown = [
            {
                "analysis": r["analysis"],
                "grouping": r["grouping"],
                "groups": r["n_groups"],
                **{
                    f"{role}: {label}": value
                    for role in ("proposal", "selected")
                    for label, value in (
                        ("worst group", r[f"worst_group_{role}"]),
                        (
                            "accuracy",
                            f"{_num(r[f'min_accuracy_{role}'], 3, False)} to "
                            f"{_num(r[f'max_accuracy_{role}'], 3, False)}",
                        ),
                        ("fairness", _ratio(r, f"fairness_{role}") if intervals else r[f"fairness_{role}"]),
                    )
                },
            }
            for r in rows
        ]
        blocks.append(
            _rows_table(
                shown,
                list(shown[0]),
                numbers=True,
                collapsed=f"Fairness of every analysis and grouping ({len(shown)} rows)" if len(shown) > 12 else None,
            )
        )
    return _section("subgroups", blocks)


def _rows_or_say(inputs: ReportInputs, blocks: list, name: str, empty: str) -> list[dict]:
    """The rows of table `name`, or none after saying in `blocks` why (the lake lacks it, or it is empty)."""
    if not inputs.has(name):
        blocks.append(_absent(name))
        return []
    rows = inputs.rows(name)
    if not rows:
        blocks.append(Text([empty]))
    return rows


def _benchmark_section(inputs: ReportInputs) -> Section:
    """Each mechanism's benchmark accuracy (and its fairness by the file's groups), and transfer: the
    benchmark beside each analysis's authority gap."""
    blocks: list = [
        Text(
            [
                "The benchmark asks each model mechanism closed-ended questions (accuracy with its 95% "
                "whole-cluster interval); transfer sets that accuracy beside the workflow's numbers. A "
                "benchmark describes the workflow only where the authority gap is 0: where the review changes "
                "the proposals, the benchmark scores an action the service did not take."
            ],
            "note",
        )
    ]
    rows = _rows_or_say(inputs, blocks, "benchmark", "The benchmark table has no rows: no mechanism in this lake.")
    if rows:
        scored = [r for r in rows if r["available"]]
        blocks.append(
            Text(
                [f"{len({r['mechanism'] for r in scored})} of {len({r['mechanism'] for r in rows})} mechanisms scored."]
            )
        )
        blocks.append(
            _rows_table(
                [
                    {
                        **r,
                        "accuracy [95% CI]": _cell({**r, "estimate": r["accuracy"]}, pct=True)
                        if r["available"]
                        else "NA",
                    }
                    for r in rows
                ],
                ["mechanism", "model", "scope", "axis", "task", "n_items", "n_clusters", "accuracy [95% CI]", "reason"],
                numbers=True,
                collapsed=f"Benchmark accuracy of every mechanism and scope ({len(rows)} rows)"
                if len(rows) > 12
                else None,
            )
        )
    fairness = _labelled(inputs.rows("benchmark_fairness"))
    if fairness:
        blocks.append(Heading("Benchmark fairness"))
        blocks += _estimated_note(fairness)
        blocks.append(
            Text(
                ["The ratio of the lowest to the highest group accuracy; this table carries no interval for it."],
                "note",
            )
        )
        blocks.append(
            _rows_table(
                [{**r, "accuracy": f"{_pct(r['min_accuracy'])} to {_pct(r['max_accuracy'])}"} for r in fairness],
                [
                    "mechanism",
                    "task",
                    "grouping",
                    "n_groups",
                    "worst_group",
                    "best_group",
                    "accuracy",
                    "fairness_ratio",
                ],
                numbers=True,
            )
        )
    blocks.append(Heading("Transfer"))
    rows = _rows_or_say(inputs, blocks, "transfer", "The transfer table has no rows.")
    if rows:
        blocks.append(
            _rows_table(
                [
                    {
                        **r,
                        "benchmark accuracy [95% CI]": _cell(
                            {
                                "estimate": r["benchmark_accuracy"],
                                "ci_lower": r["benchmark_ci_lower"],
                                "ci_upper": r["benchmark_ci_upper"],
                            },
                            pct=True,
                        )
                        if r["benchmark_available"]
                        else "not scored",
                        "p": _pct(r["intervention_rate"]),
                        "Delta image-weighted [95% CI]": _cell(
                            {
                                "estimate": r["Delta_authority"],
                                "ci_lower": r["Delta_authority_ci_lower"],
                                "ci_upper": r["Delta_authority_ci_upper"],
                            }
                        ),
                        "gap excludes zero": r["gap_excludes_zero"],
                    }
                    for r in rows
                ],
                [
                    "analysis",
                    "benchmark_model",
                    "benchmark accuracy [95% CI]",
                    "J",
                    "J_auth",
                    "p",
                    "Delta image-weighted [95% CI]",
                    "gap excludes zero",
                ],
                numbers=True,
                collapsed=f"Transfer of every analysis ({len(rows)} rows)" if len(rows) > 12 else None,
            )
        )
    return _section("benchmark", blocks)


def _provenance_section(inputs: ReportInputs) -> Section:
    """What made this report: the run, the declared rules, each analysis's stamp (queries.ANALYSIS_STAMP,
    the columns its query reads) and the mechanisms and models."""
    lake = inputs.lake
    blocks: list = [Heading("This report")]
    run = [
        ["software", f"autheval {__version__}"],
        ["this run", lake.get("run_id") or "no open run (written outside a lake run)"],
        ["written at", lake.get("written_at") or "NA"],
    ]
    if lake.get("snapshot"):
        run += [
            [
                "served snapshot before this run",
                f"{lake['snapshot']} (run {lake.get('snapshot_run_id')}, committed "
                f"{lake.get('committed_at')}, {lake.get('software') or 'software not named'})",
            ]
        ]
    else:
        run += [["served snapshot before this run", "none (this run makes the lake's first snapshot)"]]
    blocks.append(Table(["", ""], run))
    blocks.append(Heading("Estimation"))
    schemes = _schemes(inputs)
    if schemes:
        blocks.append(
            _rows_table(
                schemes, ["scheme", "interval_method", "reps", "seed", "quantile_lower", "quantile_upper", "analyses"]
            )
        )
    elif inputs.summary is None or not inputs.summary.num_rows:
        blocks.append(Text(["No estimates in this lake: no interval scheme to name."]))
    else:
        first = inputs.summary.to_pylist()[0]
        blocks.append(
            Text(
                [
                    f"Scheme {first.get('scheme')}, {first.get('reps')} whole-cluster bootstrap replicates "
                    "(the estimates' provenance columns are not in this lake)."
                ]
            )
        )
    blocks.append(Heading("Rules"))
    if inputs.rows("rules"):
        blocks.append(_rows_table(inputs.rows("rules"), list(inputs.rows("rules")[0])))
    else:
        blocks.append(
            Text(
                [
                    "No declared rules in this lake (no contexts table): the records' local scores are used as "
                    "logged (the reference study's come from the published traces)."
                ]
            )
        )
    blocks.append(Heading("Analyses: record, mechanism and data hash"))
    if inputs.rows("analyses"):
        wanted = [*ANALYSIS_STAMP, "engine", "software_version"]
        blocks.append(_rows_table(inputs.rows("analyses"), [c for c in wanted if c in inputs.rows("analyses")[0]]))
    else:
        blocks.append(Text(["The estimates carry no per-analysis provenance in this lake."]))
    blocks.append(Heading("Mechanisms and models"))
    if inputs.rows("mechanisms"):
        wanted = ["mechanism", "source", "producer", "producer_sha256", "images"]
        blocks.append(_rows_table(inputs.rows("mechanisms"), [c for c in wanted if c in inputs.rows("mechanisms")[0]]))
    for part, cols in (
        ("vlm_models", ["model", "revision", "backend", "method", "device", "dtype", "images", "prompts"]),
        ("probe_models", ["model", "images"]),
        ("model_runs", ["trainer", "mechanism", "model", "model_revision", "data_sha256", "seed"]),
    ):
        if inputs.rows(part):
            blocks.append(_rows_table(inputs.rows(part), cols))
    if not _model_names(inputs):
        blocks.append(
            Text(["No model ran in the lake: every mechanism's proposals were given (a file or the published heads)."])
        )
    if inputs.rows("input_files"):
        blocks.append(Heading("Input files"))
        blocks.append(
            _rows_table(inputs.rows("input_files"), ["name", "location", "sha256", "expected_sha256", "rows"])
        )
    missing = [
        f"{table}.{name}"
        for table, names in PROVENANCE_FIELDS.items()
        if table in inputs.columns
        for name in names
        if name not in inputs.columns[table]
    ]
    if missing:
        blocks.append(Heading("Not in the lake"))
        blocks.append(Text(["Provenance these tables do not carry yet: " + ", ".join(missing) + "."]))
    return _section("provenance", blocks)
