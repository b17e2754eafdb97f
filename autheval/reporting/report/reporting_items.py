"""The reporting-items table (CONSORT-AI, DECIDE-AI, TRIPOD+AI): what the lake can fill of each item,
the rest marked TO_BE_SUPPLIED, with the per-analysis interaction and error-case tables; one module
because every item reads the inputs its own way.
"""

from __future__ import annotations

from autheval import __version__
from autheval.reporting.report.document import Heading, ReportInputs, Section, Table, Text
from autheval.reporting.report.words import (
    _grouping,
    _model_names,
    _not_reported,
    _rows_table,
    _schemes,
    _section,
    _tiny_models,
)

TO_BE_SUPPLIED = "to be supplied by the study"


def _sum(rows: list[dict], key: str) -> int:
    return sum(int(r.get(key) or 0) for r in rows)


def _item_ai_system(inputs: ReportInputs) -> str:
    mechanisms = inputs.rows("mechanisms")
    if not mechanisms:
        return TO_BE_SUPPLIED
    said = "; ".join(
        f"{r['mechanism']} (" + (f"source {r['source']}, " if r.get("source") else "") + f"{r['images']} images)"
        for r in mechanisms
    )
    models = _model_names(inputs)
    if models:
        said += "; models: " + ", ".join(models)
    if _tiny_models(inputs):
        said += " (tiny random models on the real code path, not a real system)"
    return said + "; version and intended use beyond this: " + TO_BE_SUPPLIED


def _item_inputs(inputs: ReportInputs) -> str:
    images = inputs.rows("images")
    evaluated = inputs.rows("evaluated")
    parts = []
    if images:
        by_split: dict[str, int] = {}
        for r in images:
            by_split[r["split"]] = by_split.get(r["split"], 0) + r["images"]
        parts.append(
            f"{sum(by_split.values())} images held (" + ", ".join(f"{k} {v}" for k, v in by_split.items()) + ")"
        )
    if evaluated:
        per_split: dict[str, int] = {}
        analyses = {r["analysis"] for r in evaluated}
        for r in evaluated:
            per_split[r["split"]] = max(per_split.get(r["split"], 0), r["images"])
        parts.append(
            f"records of {len(analyses)} analyses evaluate the "
            + ", ".join(f"{k} split ({v} images)" for k, v in per_split.items())
        )
    return "; ".join(parts) + "; clinical eligibility criteria: " + TO_BE_SUPPLIED if parts else TO_BE_SUPPLIED


def _item_exclusions(inputs: ReportInputs) -> str:
    if not inputs.has("ingest"):
        return "no ingest report in this lake; " + TO_BE_SUPPLIED
    rows = inputs.rows("ingest")
    if not rows:
        return "ingestion reported no excluded or flagged row"
    return "; ".join(f"{r['reason']}: {r['rows']} ({r['action']})" for r in rows)


def _item_duplicates(inputs: ReportInputs) -> str:
    if not inputs.has("duplicates"):
        return "no duplicate report in this lake; " + TO_BE_SUPPLIED
    said = [
        f"{r['hash_kind']} pHash distance <= {r['threshold']} ({r['use']}): {r['components']} components of "
        f"{r['images']} images, {r['crossing_components']} crossing a split"
        for r in inputs.rows("duplicates")
    ]
    removed = _sum(inputs.rows("removals"), "removed")
    said.append(f"{removed} images removed as duplicates" if inputs.has("removals") else "no removal table")
    return "; ".join(said) if said else "no near-duplicates reported"


def _item_interaction(inputs: ReportInputs) -> str:
    rows = inputs.rows("change_types")
    if not rows:
        return TO_BE_SUPPLIED
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["change_type"]] = totals.get(r["change_type"], 0) + r["images"]
    n = sum(totals.values())
    said = (
        f"the record of proposal versus selection: {n} selections over {len({r['analysis'] for r in rows})} "
        "analyses; " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items()))
    )
    overrides = inputs.rows("overrides")
    if overrides:
        by_reason: dict[str, list[int]] = {}
        for r in overrides:
            total = by_reason.setdefault(r["override"], [0, 0])
            total[0] += r["images"]
            total[1] += r["changed"]
        said += "; declared overrides: " + ", ".join(
            f"{k} {v[0]} ({v[1]} changed the proposal)" for k, v in sorted(by_reason.items())
        )
    elif inputs.has("overrides"):
        said += "; no declared override"
    return said + "; what the user saw and how they were trained: " + TO_BE_SUPPLIED


# The counts of sql/reports/report_error_cases.sql, per analysis: summed in the item, one column each in its table
ERROR_COUNTS = (
    "images",
    "proposal_under",
    "proposal_over",
    "selected_under",
    "selected_over",
    "review_fixed_wrong",
    "review_broke_correct",
)


def _item_errors(inputs: ReportInputs) -> str:
    """The error-cases item: ERROR_COUNTS summed over the analyses (the table below has them per analysis)."""
    rows = inputs.rows("error_cases")
    if not rows:
        return TO_BE_SUPPLIED
    t = {k: _sum(rows, k) for k in ERROR_COUNTS}
    return (
        f"over {len(rows)} analyses and {t['images']} image-analyses against the reference action level: "
        f"proposals under-escalated {t['proposal_under']} and over-escalated {t['proposal_over']}; after review "
        f"{t['selected_under']} under and {t['selected_over']} over; review corrected {t['review_fixed_wrong']} "
        f"wrong proposals and changed {t['review_broke_correct']} correct ones (per analysis below); "
        "clinical harms: " + TO_BE_SUPPLIED
    )


def _item_subgroups(inputs: ReportInputs) -> str:
    rows = inputs.rows("subgroups")
    if not rows:
        return "no subgroup rows in this lake; " + TO_BE_SUPPLIED
    groupings = sorted({_grouping(r["grouping"]) for r in rows})
    flagged = sum(1 for r in rows if r.get("excludes_zero_adjusted"))
    fair = len(inputs.rows("fairness"))
    return (
        f"{len(groupings)} groupings ({', '.join(groupings)}); {flagged} group gaps exclude zero after "
        f"adjustment; {fair} fairness rows (see Subgroups and fairness)"
    )


def _item_outcome(inputs: ReportInputs) -> str:
    rules = inputs.rows("rules")
    if rules:
        return "the declared local utility U_z of rules " + ", ".join(
            f"{r['rule_version']} (SHA-256 {r['rule_sha256']})" for r in rules
        )
    return "the local utility U_z of the records as logged; the rules' version and SHA-256 are not in this lake"


def _item_statistics(inputs: ReportInputs) -> str:
    schemes = _schemes(inputs)
    said = (
        "; ".join(
            f"{s['scheme']} whole-cluster bootstrap ({s['interval_method']}), {s['reps']} replicates, seed {s['seed']}"
            for s in schemes
        )
        or "as the estimates table says"
    )
    adjusted = inputs.contrasts is not None and "adjustment" in inputs.contrasts.column_names
    return said + (
        "; contrasts and subgroup gaps Holm-adjusted within each declared family, BH q-values beside"
        if adjusted
        else ""
    )


def _items_section(inputs: ReportInputs, entries: dict) -> Section:
    """The reporting-items section: what the lake fills of each guideline item (the rest marked to be
    supplied), then the error cases per analysis (ERROR_COUNTS, as the item sums them)."""
    sizes = [
        next((e[k] for k in (("image_weighted", "J"), ("image_weighted", "intervention_rate")) if k in e), None)
        for e in entries.values()
    ]
    size_text = (
        (
            "; ".join(sorted({f"{s.get('n')} images in {s.get('n_clusters')} clusters" for s in sizes if s}))
            + "; units: image-weighted (primary) and cluster-equal"
        )
        if any(sizes)
        else TO_BE_SUPPLIED
    )
    missing = [f"{a}: {m} {status}" for a, e in entries.items() for m, status, _ in _not_reported(e)]
    software = f"autheval {__version__}" + (f", lake run {inputs.lake['run_id']}" if inputs.lake.get("run_id") else "")
    items = [
        ("AI system: name, version, how it proposes", "CONSORT-AI 5(i); TRIPOD+AI; DECIDE-AI", _item_ai_system(inputs)),
        ("Intended use, setting and target users", "CONSORT-AI 4a; TRIPOD+AI; DECIDE-AI", TO_BE_SUPPLIED),
        ("Input data: how acquired and selected", "CONSORT-AI 4a(ii), 5(ii); TRIPOD+AI", _item_inputs(inputs)),
        (
            "Poor-quality or unavailable inputs: what was excluded",
            "CONSORT-AI 5(iii); TRIPOD+AI",
            _item_exclusions(inputs),
        ),
        ("Duplicates and leakage between splits", "TRIPOD+AI", _item_duplicates(inputs)),
        ("Human-AI interaction", "CONSORT-AI 5(iv); DECIDE-AI", _item_interaction(inputs)),
        ("Users: number, expertise, training", "CONSORT-AI 5(iv); DECIDE-AI", TO_BE_SUPPLIED),
        (
            "AI output and how it enters the decision",
            "CONSORT-AI 5(vi); DECIDE-AI",
            "a ranked slate led by a proposed action (a_head); the reviewer keeps or replaces it (a_sel), both logged"
            if inputs.rows("change_types")
            else TO_BE_SUPPLIED,
        ),
        ("Outcome and how it is scored", "TRIPOD+AI; CONSORT-AI 6a", _item_outcome(inputs)),
        ("Sample size and unit of analysis", "TRIPOD+AI; CONSORT-AI 7a", size_text),
        ("Statistical methods and multiplicity", "TRIPOD+AI; CONSORT-AI 12", _item_statistics(inputs)),
        (
            "Missing data: numbers the record cannot support",
            "TRIPOD+AI",
            "; ".join(missing) + " (reported as such, never as numbers)"
            if missing
            else "every number of every analysis is supported by its record",
        ),
        ("Error cases", "CONSORT-AI 19; DECIDE-AI", _item_errors(inputs)),
        ("Subgroup results and fairness", "TRIPOD+AI; DECIDE-AI", _item_subgroups(inputs)),
        ("Safety, harms and adverse events", "DECIDE-AI; CONSORT-AI 19", TO_BE_SUPPLIED),
        ("Software, data and code availability", "CONSORT-AI 25; TRIPOD+AI", software + "; access: " + TO_BE_SUPPLIED),
        ("Protocol, registration, funding and conflicts", "CONSORT-AI 23-25; TRIPOD+AI", TO_BE_SUPPLIED),
    ]
    supplied = sum(1 for *_, v in items if v != TO_BE_SUPPLIED)
    blocks = [
        Text(
            [
                f"What the lake can fill of the items these guidelines ask of AI evaluations ({supplied} of "
                f'{len(items)} from the lake, in part or in full); the rest is marked "{TO_BE_SUPPLIED}".'
            ],
            "note",
        ),
        Table(["item", "asked by", "from this lake"], [list(i) for i in items], css="items"),
    ]
    interaction = _interaction_rows(inputs)
    if interaction:
        blocks.append(Heading("Human-AI interaction per analysis"))
        blocks.append(Text(["Selections by change type (none = the proposal kept), and declared overrides."], "note"))
        blocks.append(_rows_table(interaction, list(interaction[0])))
    if inputs.rows("error_cases"):
        blocks.append(Heading("Error cases per analysis"))
        blocks.append(
            Text(
                [
                    "Against the reference action level: under = below it (under-escalation), over = above "
                    "it; fixed = a wrong proposal replaced by the reference action, broke = a correct "
                    "proposal replaced."
                ],
                "note",
            )
        )
        blocks.append(
            _rows_table(
                inputs.rows("error_cases"),
                ["analysis", *ERROR_COUNTS],
            )
        )
    return _section("items", blocks)


def _interaction_rows(inputs: ReportInputs) -> list[dict]:
    """Per analysis: selections by change type and the declared overrides (one row each)."""
    kinds = sorted({r["change_type"] for r in inputs.rows("change_types")})
    rows: dict[str, dict] = {}
    for r in inputs.rows("change_types"):
        rows.setdefault(r["analysis"], {"analysis": r["analysis"], **dict.fromkeys(kinds, 0)})[r["change_type"]] = r[
            "images"
        ]
    if inputs.has("overrides"):
        for row in rows.values():
            row["overrides"], row["overrides that changed the proposal"] = 0, 0
        for r in inputs.rows("overrides"):
            if r["analysis"] in rows:
                rows[r["analysis"]]["overrides"] += r["images"]
                rows[r["analysis"]]["overrides that changed the proposal"] += r["changed"]
    return list(rows.values())
