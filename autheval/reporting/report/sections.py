"""The report laid out once: build_report names the study from the inputs, writes the title and lede and
puts every section builder's section in reading order; the renderers take their Document from here.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from autheval import __version__
from autheval.reporting.report.document import Document, ReportInputs, Text
from autheval.reporting.report.reporting_items import _items_section
from autheval.reporting.report.sections_data import _benchmark_section, _provenance_section, _subgroups_section
from autheval.reporting.report.sections_monitoring import _criteria_section, _monitoring_section, _trend_section
from autheval.reporting.report.sections_study import (
    _contrasts_section,
    _decomposition_section,
    _forest_section,
    _levels_section,
    _summary_section,
)
from autheval.reporting.report.words import _model_mechanisms, _tiny_models

STUDY_NAMES = {
    "isic2019_reference": (
        "AuthEval reference study",
        "ISIC 2019 test split, the published case traces "
        "(MedGemma readout and two control mechanisms, three review regimes)",
    ),
    "synthetic": ("Synthetic ISIC-shaped cohort", "generated metadata, labels and images (not patients)"),
    "isic2019": ("ISIC 2019 cohort", "the ISIC 2019 training files"),
}


def _by_analysis(inputs: ReportInputs) -> dict[str, dict]:
    """analysis -> {'study', 'level', (unit, metric): estimate row}, in the estimates' order."""
    out: dict[str, dict] = {}
    for r in inputs.rows("estimates"):
        entry = out.setdefault(r["analysis"], {"study": r["study"], "level": r["record_level"]})
        entry[(r["unit"], r["metric"])] = r
    if not out and inputs.summary is not None:  # an older caller: the summary table alone
        for s in inputs.summary.to_pylist():
            out[s["analysis"]] = {"study": s.get("study"), "level": None, **_summary_rows(s)}
    return out


def _summary_rows(s: dict) -> dict:
    def est(value, lo=None, hi=None, n=None):
        return {
            "estimate": value,
            "ci_lower": lo,
            "ci_upper": hi,
            "available": value is not None,
            "n": n,
            "status": "estimated" if value is not None else None,
        }

    rows = {
        ("image_weighted", "intervention_rate"): est(s.get("intervention_rate"), n=s.get("n_images")),
        ("image_weighted", "delta"): est(s.get("delta")),
    }
    for key, unit in (("image", "image_weighted"), ("cluster", "cluster_equal")):
        rows[(unit, "Delta_authority")] = est(
            s.get(f"Delta_authority_{key}"),
            s.get(f"Delta_authority_{key}_ci_lower"),
            s.get(f"Delta_authority_{key}_ci_upper"),
            s.get("n_images"),
        )
        rows[(unit, "Delta_authority")]["n_clusters"] = s.get("n_clusters")
    return rows


def _study_of(inputs: ReportInputs) -> tuple[str, str]:
    """The study's name and source, from the images' source (or the records alone)."""
    sources = list(dict.fromkeys(r["source"] for r in inputs.rows("images") if r.get("source")))
    if len(sources) == 1 and sources[0] in STUDY_NAMES:
        return STUDY_NAMES[sources[0]]
    if sources:
        return "AuthEval study", "images from " + ", ".join(sources)
    if inputs.summary is None and "estimates" not in inputs.columns:
        if {"trend", "monitor"} & set(inputs.columns):
            return "AuthEval deployment", "landed monitoring logs (no reference study or cohort in this lake)"
        return "AuthEval lake", "nothing evaluated yet (no estimates, no landed logs)"
    return "AuthEval study", "records in the lake (no images table)"


def build_report(inputs: ReportInputs) -> Document:
    """The report's title, lede and sections from what the lake holds."""
    study, source = _study_of(inputs)
    entries = _by_analysis(inputs)
    tiny_mechanisms = set(_model_mechanisms(inputs)) if _tiny_models(inputs) else set()
    for row in inputs.rows("analyses"):
        if row.get("mechanism") in tiny_mechanisms and row["analysis"] in entries:
            entries[row["analysis"]]["tiny"] = True
    title = f"{study}: authority-preserving evaluation"
    lede = _lede(inputs, study, source, entries)
    sections = [
        _summary_section(inputs, entries),
        _decomposition_section(entries),
        _levels_section(entries),
        _forest_section(inputs),
        _contrasts_section(inputs),
        _subgroups_section(inputs),
        _benchmark_section(inputs),
        _trend_section(inputs),
        _monitoring_section(inputs),
        _criteria_section(inputs),
        _items_section(inputs, entries),
        _provenance_section(inputs),
    ]
    return Document(title, lede, sections)


def _lede(inputs: ReportInputs, study: str, source: str, entries: dict[str, dict]) -> list[Text]:
    """The lines under the title: the study, its source, the analyses, what wrote it (run, time), and the
    warnings a reader needs first (a synthetic cohort, tiny models)."""
    lede = [
        Text(
            [
                ("b", "Study:"),
                f" {study}. ",
                ("b", "Source:"),
                f" {source}. ",
                ("b", "Analyses:"),
                f" {len(entries)} in {len({e.get('study') for e in entries.values()})} group(s). ",
                ("b", "Written by"),
                f" autheval {__version__}"
                + (f", run {inputs.lake['run_id']}" if inputs.lake.get("run_id") else "")
                + (f", {inputs.lake['written_at']}" if inputs.lake.get("written_at") else "")
                + ".",
            ]
        )
    ]
    if inputs.note:
        lede.append(Text([inputs.note], "note"))
    if source == STUDY_NAMES["synthetic"][1]:
        lede.append(
            Text(
                [
                    "The cohort is synthetic: its images and labels are generated, so every number here "
                    "shows the method at work, not a clinical result."
                ],
                "callout",
            )
        )
    tiny = _tiny_models(inputs)
    if tiny:
        lede.append(
            Text(
                [
                    ("b", "Tiny models."),
                    " The model mechanisms ("
                    + ", ".join(_model_mechanisms(inputs))
                    + ") come from tiny random models ("
                    + ", ".join(tiny)
                    + ") run on the real code path: "
                    "their proposals are random, so their numbers test the pipeline and say nothing about "
                    "any real model.",
                ],
                "callout",
            )
        )
    return lede


def without_clock(doc: Document, inputs: ReportInputs) -> Document:
    """`doc` (built from `inputs`) as it reads without the clock time it was written at, in the lede and
    the provenance: what the printable form prints, so the same lake prints the same bytes (the served
    snapshot and the run name the lake's state). The other sections, their plots included, are `doc`'s."""
    clockless = replace(inputs, lake={**inputs.lake, "written_at": None})
    study, source = _study_of(clockless)
    sections = [_provenance_section(clockless) if s.anchor == "provenance" else s for s in doc.sections]
    return Document(doc.title, _lede(clockless, study, source, _by_analysis(clockless)), sections)


def _document(report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None, note: str | None) -> Document:
    if isinstance(report, Document):
        return report
    if not isinstance(report, ReportInputs):  # an older caller: the summary table with its contrasts
        report = ReportInputs(summary=report, contrasts=contrasts, note=note)
    return build_report(report)
