"""The study's sections: what the numbers say, the decomposition, the record levels, the forest plots
and the paired contrasts, with the rows people read them by (headline, contrast_rows); the sections a
study report leads with, apart from the monitoring and data sections.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.reporting.report.document import Heading, Image, ReportInputs, Section, Table, Text
from autheval.reporting.report.plots import MAX_PLOTTED_CONTRAST_ROWS, _forest_groups, forest_plot_png
from autheval.reporting.report.words import (
    GLOBAL_METRICS,
    KEY_METRICS,
    METRIC_WORDS,
    _arrow_table,
    _cell,
    _excludes_zero,
    _known,
    _not_reported,
    _num,
    _pct,
    _section,
    _words_of_level,
)


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
        "study": row["study"],
        "analysis": row["analysis"],
        "images": row["n_images"],
        "clusters": row["n_clusters"],
        "p": _rounded(row["intervention_rate"]),
        "delta": _rounded(row["delta"]),
        "Delta image-weighted [95% CI]": _interval(row, "Delta_authority_image"),
        "Delta cluster-equal [95% CI]": _interval(row, "Delta_authority_cluster"),
    }


CONTRAST_FLAG = "excludes zero (Holm-adjusted)"
CONTRAST_NOTE = (
    "The flag is the multiplicity-adjusted one: Holm's adjusted bootstrap p-value below the "
    "intervals' alpha (0.05 for 95% intervals) over the row's family (every contrast of its study "
    "in one unit, family_size tests); the raw interval's flag and the Benjamini-Hochberg q-value "
    "are beside it."
)


def contrast_rows(contrasts: pa.Table) -> pa.Table:
    """The contrasts as the report shows them: the headline flag is the adjusted one (a table of an
    older lake, without the adjusted columns, keeps its raw flag, named as such)."""
    out = []
    for r in contrasts.to_pylist():
        row = {
            "contrast": r["contrast"],
            "unit": r["unit"],
            "difference": r["difference"],
            "ci_lower": r["ci_lower"],
            "ci_upper": r["ci_upper"],
        }
        if "excludes_zero_adjusted" in r:
            row.update(
                {
                    CONTRAST_FLAG: r["excludes_zero_adjusted"],
                    "p": r["p_value"],
                    "p (Holm)": r["p_adjusted"],
                    "q (BH)": r["q_value"],
                    "family": r["family"],
                    "family_size": r["family_size"],
                    "excludes zero (unadjusted)": r["excludes_zero"],
                }
            )
        else:
            row["excludes zero (unadjusted)"] = r.get("excludes_zero")
        out.append(row)
    return pa.Table.from_pylist(out)


LEVEL_SUPPORTS = {
    "proposal_only": "nothing about authority (no selected action)",
    "role_separated": "p and J (not J_auth, delta or Delta: the proposal's same-rule local score is not logged)",
    "full_counterfactual": "p, J, J_auth, Delta, and delta when p > 0",
}

LEVEL_CLAUSE = {
    "full_counterfactual": "full counterfactual record: supports p, delta and Delta",
    "role_separated": "role-separated record: supports p and J only, not J_auth, delta or Delta",
    "proposal_only": "proposal-only record: supports none of p, delta and Delta",
}


def _sign(row: dict) -> str:
    return "positive" if row["estimate"] > 0 else "negative" if row["estimate"] < 0 else "zero"


def _unit_words(row: dict) -> str:
    zero = _excludes_zero(row)
    if zero is None:
        return f"{_sign(row)} {_cell(row)} (no interval)"
    return f"{_sign(row)} {_cell(row)}" + (
        " and its 95% interval excludes zero" if zero else ", but its 95% interval includes zero"
    )


def units_disagree(image: dict | None, cluster: dict | None) -> bool:
    """Whether the image-weighted and cluster-equal gaps disagree: both intervals exclude zero with
    opposite signs, or one excludes zero and the other does not."""
    if image is None or cluster is None or not (_known(image) and _known(cluster)):
        return False
    zero_i, zero_c = _excludes_zero(image), _excludes_zero(cluster)
    if zero_i is None or zero_c is None:
        return False
    if zero_i and zero_c:
        return _sign(image) != _sign(cluster)
    return zero_i != zero_c


def analysis_paragraph(analysis: str, entry: dict) -> Text:
    """What p, delta and Delta say for one analysis, in plain words: units, direction, whether the
    record supports each number, and whether the gap's interval excludes zero."""

    def img(metric):
        return entry.get(("image_weighted", metric))

    p, d, gap, j, j_auth = img("intervention_rate"), img("delta"), img("Delta_authority"), img("J"), img("J_auth")
    gap_c = entry.get(("cluster_equal", "Delta_authority"))
    level = entry.get("level")
    size = max((r for r in (j, p, gap) if r is not None), key=lambda r: r.get("n") or 0, default=None)
    head = [str(entry.get("study"))]
    if entry.get("tiny"):
        head.append("a tiny random model's proposals")
    if level:
        head.append(LEVEL_CLAUSE.get(level, f"{_words_of_level(level)} record"))
    if size is not None:
        head.append(
            f"{size.get('n')} images in {size.get('n_clusters')} clusters"
            if size.get("n")
            else f"{size.get('n_clusters')} clusters"
        )
    parts: list = [("b", analysis), " (" + "; ".join(head) + "). "]
    if _known(p):
        parts.append(
            f"The review changed the proposal on p = {_pct(p['estimate'])} of images "
            f"[{_pct(p.get('ci_lower'))}, {_pct(p.get('ci_upper'))}]. "
        )
    if _known(d):
        direction = (
            "the proposal would have scored higher than the action taken"
            if d["estimate"] > 0
            else "the action taken scored higher than the proposal would have"
            if d["estimate"] < 0
            else "the action taken scored as the proposal would have"
        )
        parts.append(f"Where it changed it, {direction}: delta = {_cell(d)} local-utility points per changed image. ")
    if _known(gap) and _known(p) and p["estimate"] == 0:
        parts.append("No proposal was changed, so Delta = 0 by identification and delta is undefined. ")
    elif _known(gap):
        clustered = f"; cluster-equal {_cell(gap_c)}" if gap_c is not None else ""
        parts.append(
            f"Over all images, Delta = p \u00d7 delta = {_cell(gap)} points per image (image-weighted{clustered}). "
        )
        scores = (
            f" (J_auth = {_num(j_auth['estimate'])} against J = {_num(j['estimate'])})"
            if _known(j) and _known(j_auth)
            else ""
        )
        if gap["estimate"] > 0:
            meaning = f"under the same local rule the proposal alone scores higher than the executed workflow{scores}"
            verdict = "a proposal-level evaluation overstates this workflow"
        elif gap["estimate"] < 0:
            meaning = f"the review's changes raised the local score above the proposal's{scores}"
            verdict = "a proposal-level evaluation understates this workflow"
        else:
            meaning, verdict = f"the proposal and the executed workflow score the same{scores}", ""
        sign = _sign(gap)
        zero = _excludes_zero(gap)
        zero_c = _excludes_zero(gap_c) if _known(gap_c) else None
        if gap_c is not None and units_disagree(gap, gap_c):
            parts += [
                ("b", "The two units disagree:"),
                f" image-weighted (each image counts once) the gap is {_unit_words(gap)}; cluster-equal (each "
                f"lesion cluster counts once) it is {_unit_words(gap_c)}. ",
                (
                    "So no single direction is concluded: lesions with many images pull the image-weighted gap "
                    "one way and the typical lesion goes the other; read both units. "
                    if zero and zero_c
                    else "So the gap is shown in one unit only: it rests on how images spread over lesion "
                    "clusters (lesions with many images weigh more image-weighted); no direction is concluded "
                    "before both units are read. "
                ),
            ]
        elif zero is True and verdict:
            both = " in both units (image-weighted and cluster-equal)" if zero_c else ""
            parts.append(f"The gap is {sign} and its 95% interval excludes zero{both}: {meaning}, so {verdict}. ")
        elif zero is False:
            both = " in both units" if zero_c is False else ""
            parts.append(
                f"The point estimate is {sign} ({meaning}), but its 95% interval includes zero{both}: the record "
                "does not show a gap in either direction at this sample size. "
            )
        else:
            parts.append(f"The gap is {sign}: {meaning}" + (f", so {verdict}" if verdict else "") + ". ")
    missing = _not_reported(entry)
    if missing:
        said = "; ".join(f"{m} {status} ({reason})" if reason else f"{m} {status}" for m, status, reason in missing)
        parts.append(f"Not reported as numbers: {said}.")
    return Text(parts)


def _summary_section(inputs: ReportInputs, entries: dict) -> Section:
    blocks: list = [
        Text(
            [
                "How to read: p is the share of images whose proposal the review changed; delta and Delta "
                "are points of the declared local utility U_z (0 for the reference action, negative for "
                "under- or over-escalation). delta = U_z(proposal) - U_z(selected) averaged over the changed "
                "images; Delta = J_auth - J = p \u00d7 delta per image, where J is the executed workflow's "
                "mean local score and J_auth the proposal's under the same rule. A positive gap means a "
                "proposal-level evaluation overstates the workflow, a negative one that it understates it. "
                "Brackets are 95% whole-cluster bootstrap intervals. The gap is given in both units, "
                "image-weighted (each image counts once) and cluster-equal (each lesion cluster counts once); "
                "where they disagree, no direction is concluded."
            ],
            "note",
        )
    ]
    split = [
        a
        for a, e in entries.items()
        if units_disagree(e.get(("image_weighted", "Delta_authority")), e.get(("cluster_equal", "Delta_authority")))
    ]
    if split:
        blocks.append(
            Text(
                [
                    ("b", f"The units disagree in {len(split)} of {len(entries)} analyses"),
                    f" ({', '.join(split)}): the image-weighted and cluster-equal gaps point in opposite directions "
                    "with both intervals excluding zero, or only one of them excludes zero. Their paragraphs give "
                    "both and conclude no direction.",
                ],
                "callout",
            )
        )
    if not entries:
        missing = ["estimates"] if "estimates" not in inputs.columns else []
        missing += ["study_summary"] if inputs.summary is None else []
        blocks.append(
            Text(
                [
                    "The lake holds no estimates"
                    + (f" (it has no {' and no '.join(missing)} table)" if missing else "")
                    + ": no reference study or cohort was evaluated in it, so there is no analysis to report"
                    + (
                        ". What was monitored is under Trend and Monitoring a deployment."
                        if _monitored(inputs)
                        else "."
                    )
                ]
            )
        )
    blocks += [analysis_paragraph(analysis, entry) for analysis, entry in entries.items()]
    return _section("summary", blocks)


def _monitored(inputs: ReportInputs) -> bool:
    return bool(inputs.rows("trend") or inputs.rows("monitor_latest"))


def _metric_rows(entries: dict, metrics: tuple[str, ...], product: bool) -> list[list]:
    rows = []
    for analysis, entry in entries.items():
        for unit in ("image_weighted", "cluster_equal"):
            if not any((unit, m) in entry for m in metrics):
                continue
            cells = [_cell(entry.get((unit, m))) for m in metrics]
            if product:
                p, d = entry.get((unit, "intervention_rate")), entry.get((unit, "delta"))
                known = (
                    unit == "image_weighted"
                    and p
                    and d
                    and p.get("estimate") is not None
                    and d.get("estimate") is not None
                )
                cells.append(_num(p["estimate"] * d["estimate"]) if known else "NA")
            rows.append([analysis, unit.replace("_", "-"), *cells])
    return rows


def _decomposition_section(entries: dict) -> Section:
    blocks: list = [
        Text(
            [
                "Each cell is the estimate with its 95% interval in brackets, or the reason it is not a "
                "number. J and J_auth are the mean local scores of the executed action and of the proposal; "
                "the last column repeats Delta from its parts (image-weighted)."
            ],
            "note",
        )
    ]
    rows = _metric_rows(entries, KEY_METRICS, product=True)
    blocks.append(
        Table(
            ["analysis", "unit", *[METRIC_WORDS.get(m, m) for m in KEY_METRICS], "p \u00d7 delta"], rows, numbers=True
        )
        if rows
        else Text(["No estimates in the lake."])
    )
    if any(e.get(("image_weighted", m), {}).get("available") for e in entries.values() for m in GLOBAL_METRICS):
        blocks.append(Heading("Against the benchmark score"))
        blocks.append(
            Text(
                [
                    "J_std is the proposal's global (benchmark) score, the same for every service; "
                    "Delta_total = J_std - J = Delta_utility + Delta splits the benchmark's distance from the "
                    "workflow into the local rule's share (Delta_utility = J_std - J_auth) and authority's "
                    "(Delta)."
                ],
                "note",
            )
        )
        blocks.append(
            Table(
                ["analysis", "unit", *GLOBAL_METRICS],
                _metric_rows(entries, GLOBAL_METRICS, product=False),
                numbers=True,
            )
        )
    return _section("decomposition", blocks)


def _levels_section(entries: dict) -> Section:
    rows = []
    for analysis, entry in entries.items():
        level = entry.get("level")
        missing = _not_reported(entry, KEY_METRICS + GLOBAL_METRICS)
        said = "; ".join(f"{m}: {status}" + (f" ({reason})" if reason else "") for m, status, reason in missing)
        rows.append(
            [
                analysis,
                _words_of_level(level),
                LEVEL_SUPPORTS.get(level or "", "as its statuses say"),
                said or "every number is reported",
            ]
        )
    blocks: list = [
        Text(
            [
                "The record level decides what may be reported: proposal-only recovers nothing; "
                "role-separated recovers p and J; full counterfactual recovers J_auth, Delta and delta "
                "(when p > 0). A number the record cannot support is reported as not recoverable with "
                "the reason, never as a number."
            ],
            "note",
        )
    ]
    blocks.append(
        Table(["analysis", "record level", "supports", "not reported as numbers"], rows)
        if rows
        else Text(["No estimates in the lake."])
    )
    return _section("levels", blocks)


def _forest_section(inputs: ReportInputs) -> Section:
    if inputs.summary is None or not inputs.summary.num_rows:
        why = (
            "This lake has no study_summary table" if inputs.summary is None else "The study_summary table has no rows"
        )
        return _section("forest", [Text([f"{why}: no analysis to plot (no reference study or cohort)."])])
    groups = [g for g, s, _ in _forest_groups(inputs.summary, inputs.contrasts) if s]
    blocks: list = [
        Text(
            [
                "One panel per group (" + ", ".join(groups or ["none"]) + "): the authority gap of each "
                "analysis in both units with its 95% interval, and the group's paired contrasts when there "
                f"are at most {MAX_PLOTTED_CONTRAST_ROWS} (more are in the table below)."
            ],
            "note",
        ),
        Image(
            "forest_plot.png",
            forest_plot_png(inputs.summary, inputs.contrasts),
            "forest plots of the authority gaps by group",
        ),
    ]
    return _section("forest", blocks)


def _contrasts_section(inputs: ReportInputs) -> Section:
    contrasts = inputs.contrasts
    if contrasts is None or not contrasts.num_rows:
        return _section("contrasts", [Text(["No paired contrasts in this lake."])])
    rows = contrasts.to_pylist()
    adjusted = "excludes_zero_adjusted" in contrasts.column_names
    blocks: list = []
    if adjusted:
        kept = [r for r in rows if r["excludes_zero_adjusted"]]
        raw = sum(1 for r in rows if r.get("excludes_zero"))
        lost = sum(1 for r in rows if r.get("excludes_zero") and not r["excludes_zero_adjusted"])
        text = [
            ("b", f"{len(kept)} of {len(rows)} paired contrasts exclude zero after the Holm adjustment"),
            " within their family (the headline flag; a difference is the first arm's Delta minus the "
            "second's on the same clusters)",
        ]
        text.append(
            f"; {raw} exclude zero on the raw interval"
            + (f", {lost} of which do not survive the adjustment" if lost else "")
            + "."
        )
        blocks.append(Text(text))
        for r in kept[:6]:
            blocks.append(
                Text(
                    [
                        ("b", r["contrast"]),
                        f" ({r['unit'].replace('_', '-')}): difference "
                        f"{_num(r['difference'])} [{_num(r['ci_lower'])}, {_num(r['ci_upper'])}] local-utility "
                        f"points per image, Holm p = {_num(r['p_adjusted'], 4, False)} over "
                        f"{r['family_size']} test(s) of family {r['family']}.",
                    ]
                )
            )
        if len(kept) > 6:
            blocks.append(Text([f"... and {len(kept) - 6} more in the table."]))
    else:
        blocks.append(
            Text(
                [
                    "This lake's contrasts carry no multiplicity adjustment: the flag below is the raw "
                    "interval's, one test at a time."
                ]
            )
        )
    shown = contrast_rows(contrasts)
    blocks.append(Text([CONTRAST_NOTE], "note"))
    blocks.append(_arrow_table(shown))
    return _section("contrasts", blocks)
