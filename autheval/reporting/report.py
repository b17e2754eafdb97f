"""The study report: a front page a reviewer can read, as Markdown and as one self-contained HTML page
(inline CSS, plots as data URIs, no script, no network), built from what the lake holds.

The lake's `report` asset runs the SQL files named in REPORT_QUERIES over the tables it has and hands the
results here (`ReportInputs`); this module only words and lays them out, so both formats come from one
list of sections. Every lake value is escaped where it is written (a mechanism name may be markup).
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import pyarrow as pa

from autheval import __version__

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
    stray = []
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
        short = (lambda name: name[: -len(suffix)]) if rows and all(
            str(r["analysis"]).endswith(suffix) for r in rows) else (lambda name: name)
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
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights) + 0.6), dpi=110, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
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
    axes[-1, 0].set_xlabel("local-utility points per image, 95% whole-cluster bootstrap interval\n"
                           "blue: image-weighted, orange: cluster-equal, green: paired contrasts", fontsize=8)
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
        return "NA" if value != value else f"{value:.4f}"
    return str(value)


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


# --- what the asset asks of the lake -----------------------------------------------------------------

# (part, SQL file, {table: columns it needs}): the asset runs, for each part, the first file whose tables
# and columns the lake holds; a part the lake cannot fill is reported as absent, never guessed.
# the monitor's columns the report reads (autheval.monitoring.monitor.MONITOR_SCHEMA has them, and more)
MONITOR_COLUMNS = ("site", "model_version", "mechanism", "metric", "unit", "period", "look", "n_clusters", "estimate",
                   "cs_lower", "cs_upper", "ci_lower", "ci_upper", "lower", "upper", "status", "reason",
                   "alpha_adjusted")
REPORT_QUERIES: tuple[tuple[str, str, dict[str, tuple[str, ...]]], ...] = (
    ("estimates", "reports/report_estimates", {"estimates": ("study", "analysis", "unit", "metric", "estimate", "ci_lower",
                                                     "ci_upper", "n", "n_clusters", "available", "status", "reason",
                                                     "record_level", "analysis_order")}),
    ("analyses", "reports/report_analyses_stamped", {"estimates": ("study", "analysis", "record_level", "mechanism", "source",
                                                           "data_sha256", "rule_version", "rule_sha256", "scheme",
                                                           "interval_method", "reps", "seed", "quantile_lower",
                                                           "quantile_upper", "engine", "software_version",
                                                           "analysis_order")}),
    ("analyses", "reports/report_analyses", {"estimates": ("study", "analysis", "record_level", "model", "source",
                                                   "data_sha256", "scheme", "interval_method", "reps", "seed",
                                                   "quantile_lower", "quantile_upper", "analysis_order")}),
    ("rules", "reports/report_rules", {"contexts": ("rule_version", "rule_sha256")}),
    ("rules", "reports/report_rules_estimates", {"estimates": ("analysis", "rule_version", "rule_sha256")}),
    ("mechanisms", "reports/report_mechanisms_produced", {"proposals": ("mechanism", "source", "producer", "producer_sha256")}),
    ("mechanisms", "reports/report_mechanisms_produced_unsourced", {"proposals": ("mechanism", "producer", "producer_sha256")}),
    ("mechanisms", "reports/report_mechanisms", {"proposals": ("mechanism", "source")}),
    ("mechanisms", "reports/report_mechanisms_unsourced", {"proposals": ("mechanism",)}),
    ("vlm_models", "reports/report_vlm_models", {"vlm_scores": ("model", "revision", "backend", "method", "device", "dtype",
                                                        "image_id", "prompt_id")}),
    ("probe_models", "reports/report_probe_models", {"probe_features": ("model", "image_id")}),
    ("model_runs", "reports/report_model_runs", {"model_runs": ("trainer", "mechanism", "model", "model_revision",
                                                        "data_sha256", "seed")}),
    ("change_types", "reports/report_change_types", {"selections": ("analysis", "change_type")}),
    ("overrides", "reports/report_overrides", {"selections": ("analysis", "override", "a_head", "a_sel")}),
    ("error_cases", "reports/report_error_cases", {"selections": ("analysis", "image_id", "a_head", "a_sel"),
                                           "images": ("image_id", "ideal_action_level")}),
    ("ingest", "reports/report_ingest", {"ingest_report": ("reason", "action")}),
    ("duplicates", "reports/report_duplicates", {"duplicate_report": ("hash_kind", "threshold", "use", "component_id",
                                                              "component_crosses_split")}),
    ("removals", "reports/report_duplicate_removals", {"duplicate_removals": ("hash_kind", "threshold")}),
    ("images", "reports/report_images", {"images": ("image_id", "source"), "clusters": ("image_id", "split")}),
    ("evaluated", "reports/report_evaluated", {"records": ("analysis", "case_id", "cluster_id"),
                                       "clusters": ("image_id", "split")}),
    ("input_files", "reports/report_input_files_reference", {"input_files": ("name", "source", "source_sha256", "rows")}),
    ("input_files", "reports/report_input_files_raw", {"input_files": ("role", "path", "sha256", "expected_sha256")}),
    ("subgroups", "reports/report_subgroups", {"subgroups": ("analysis", "grouping", "group_value", "n_images", "n_clusters",
                                                     "estimable", "reason", "accuracy_proposal", "accuracy_selected",
                                                     "metric", "unit", "estimate", "ci_lower", "ci_upper",
                                                     "p_adjusted", "q_value", "family_size", "excludes_zero",
                                                     "excludes_zero_adjusted", "status")}),
    ("fairness", "reports/report_fairness", {"fairness": ("analysis", "grouping", "n_groups", "worst_group_proposal",
                                                  "min_accuracy_proposal", "max_accuracy_proposal", "fairness_proposal",
                                                  "worst_group_selected", "min_accuracy_selected",
                                                  "max_accuracy_selected", "fairness_selected")}),
    ("trend", "reports/report_trend", {"trend": ("period", "pool", "unit", "metric", "estimate", "ci_lower", "ci_upper", "n",
                                         "n_clusters", "available", "status", "reason")}),
    ("monitor_latest", "reports/report_monitor_latest", {"monitor": MONITOR_COLUMNS}),
    ("monitor_series", "reports/report_monitor_series", {"monitor": MONITOR_COLUMNS}),
    ("monitor_case_mix", "reports/report_monitor_case_mix", {"monitor_case_mix": (
        "site", "period", "look", "dimension", "category", "baseline_share", "share", "p_value", "shifted", "reason")}),
)
REPORT_TABLES = tuple(sorted({t for _, _, needs in REPORT_QUERIES for t in needs} | {"study_summary", "contrasts"}))

# Provenance each result row should name (architecture: "every number names what made it"); the report
# lists the ones a table of this lake does not carry.
ROW_PROVENANCE = ("data_sha256", "rule_version", "rule_sha256", "scheme", "seed", "reps", "engine", "software_version")
PROVENANCE_FIELDS = {
    **{table: ROW_PROVENANCE for table in ("estimates", "contrasts", "study_summary", "subgroups", "fairness", "trend")},
    "proposals": ("source", "producer", "producer_sha256"),
}


def report_queries(columns: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Part -> SQL file for every part of the report the lake can fill, given {table: its columns}."""
    have = {name: set(cols) for name, cols in columns.items()}
    chosen: dict[str, str] = {}
    for part, sql, needs in REPORT_QUERIES:
        if part not in chosen and all(t in have and set(cols) <= have[t] for t, cols in needs.items()):
            chosen[part] = sql
    return chosen


@dataclass
class ReportInputs:
    """What the report is made of: the headline tables, the parts the SQL files gave (rows as dicts;
    a part the lake could not fill is absent), the lake's tables with their columns, and the lake's
    state (run id of this run, the served snapshot before it)."""

    summary: pa.Table
    contrasts: pa.Table | None = None
    parts: dict[str, list[dict]] = field(default_factory=dict)
    columns: dict[str, list[str]] = field(default_factory=dict)
    lake: dict = field(default_factory=dict)
    note: str | None = None  # a free line under the title (older callers' provenance text)

    def rows(self, part: str) -> list[dict]:
        return self.parts.get(part) or []

    def has(self, part: str) -> bool:
        return part in self.parts


# --- a tiny document model, rendered as Markdown and as HTML ---------------------------------------

@dataclass
class Text:
    """A paragraph: plain strings and (style, text) pairs, style 'b' (bold) or 'code'."""

    parts: list
    kind: str = "p"  # 'p', 'note' (small print) or 'callout' (a warning box)


@dataclass
class Table:
    columns: list[str]
    rows: list[list]
    collapsed: str | None = None  # a summary line: the table sits in a closed <details> in HTML
    numbers: bool = False  # a table of estimates: cells past the first two do not wrap
    css: str = ""  # an extra class of the HTML table


@dataclass
class Image:
    file: str  # the PNG beside report.md
    png: bytes
    alt: str


@dataclass
class Heading:
    title: str


@dataclass
class Section:
    title: str
    anchor: str
    blocks: list = field(default_factory=list)


SECTION_TITLES = {
    "summary": "What the numbers say",
    "decomposition": "Decomposition: J, J_auth, p, delta, Delta",
    "levels": "Record levels and what they support",
    "forest": "Forest plots by regime",
    "contrasts": "Paired contrasts",
    "subgroups": "Subgroups and fairness",
    "trend": "Trend",
    "monitoring": "Monitoring a deployment",
    "items": "Reporting items (CONSORT-AI, DECIDE-AI, TRIPOD+AI)",
    "provenance": "Provenance",
}
TO_BE_SUPPLIED = "to be supplied by the study"
TINY_MODEL_PREFIX = "tiny-"

STUDY_NAMES = {
    "isic2019_reference": ("AuthEval reference study", "ISIC 2019 test split, the published case traces "
                                                       "(MedGemma readout and two control mechanisms, three review regimes)"),
    "synthetic": ("Synthetic ISIC-shaped cohort", "generated metadata, labels and images (not patients)"),
    "isic2019": ("ISIC 2019 cohort", "the ISIC 2019 training files"),
}
LEVEL_WORDS = {
    "full_counterfactual": "full counterfactual",
    "role_separated": "role-separated",
    "proposal_only": "proposal-only",
}
LEVEL_SUPPORTS = {
    "proposal_only": "nothing about authority (no selected action)",
    "role_separated": "p and J (not J_auth, delta or Delta: the proposal's same-rule local score is not logged)",
    "full_counterfactual": "p, J, J_auth, Delta, and delta when p > 0",
}
METRIC_WORDS = {"intervention_rate": "p", "Delta_authority": "Delta"}
KEY_METRICS = ("J", "J_auth", "intervention_rate", "delta", "Delta_authority")
GLOBAL_METRICS = ("J_std", "Delta_utility", "Delta_total")
STATUS_WORDS = {"not_recoverable": "not recoverable", "undefined": "undefined", "not_supplied": "not supplied"}


def _num(value, digits: int = 3, signed: bool = True) -> str:
    if value is None or value != value:
        return "NA"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "NA" if value is None or value != value else f"{100 * value:.1f}%"


def _cell(row: dict | None, pct: bool = False) -> str:
    """An estimate with its interval, or the word for why it is not a number."""
    if row is None:
        return "NA"
    if not row.get("available", True) or row.get("estimate") is None:
        return STATUS_WORDS.get(row.get("status"), "NA")
    show = _pct if pct else _num
    if row.get("ci_lower") is None or row.get("ci_upper") is None:
        return f"{show(row['estimate'])} [NA]"
    return f"{show(row['estimate'])} [{show(row['ci_lower'])}, {show(row['ci_upper'])}]"


def _excludes_zero(row: dict | None) -> bool | None:
    if row is None or row.get("ci_lower") is None or row.get("ci_upper") is None:
        return None
    return row["ci_lower"] > 0 or row["ci_upper"] < 0


def _by_analysis(inputs: ReportInputs) -> dict[str, dict]:
    """analysis -> {'study', 'level', (unit, metric): estimate row}, in the estimates' order."""
    out: dict[str, dict] = {}
    for r in inputs.rows("estimates"):
        entry = out.setdefault(r["analysis"], {"study": r["study"], "level": r["record_level"]})
        entry[(r["unit"], r["metric"])] = r
    if not out:  # an older caller: the summary table alone
        for s in inputs.summary.to_pylist():
            out[s["analysis"]] = {"study": s.get("study"), "level": None, **_summary_rows(s)}
    return out


def _summary_rows(s: dict) -> dict:
    def est(value, lo=None, hi=None, n=None):
        return {"estimate": value, "ci_lower": lo, "ci_upper": hi, "available": value is not None, "n": n,
                "status": "estimated" if value is not None else None}

    rows = {("image_weighted", "intervention_rate"): est(s.get("intervention_rate"), n=s.get("n_images")),
            ("image_weighted", "delta"): est(s.get("delta"))}
    for key, unit in (("image", "image_weighted"), ("cluster", "cluster_equal")):
        rows[(unit, "Delta_authority")] = est(s.get(f"Delta_authority_{key}"), s.get(f"Delta_authority_{key}_ci_lower"),
                                              s.get(f"Delta_authority_{key}_ci_upper"), s.get("n_images"))
        rows[(unit, "Delta_authority")]["n_clusters"] = s.get("n_clusters")
    return rows


def _study_of(inputs: ReportInputs) -> tuple[str, str]:
    """The study's name and source, from the images' source (or the records alone)."""
    sources = list(dict.fromkeys(r["source"] for r in inputs.rows("images") if r.get("source")))
    if len(sources) == 1 and sources[0] in STUDY_NAMES:
        return STUDY_NAMES[sources[0]]
    if sources:
        return "AuthEval study", "images from " + ", ".join(sources)
    return "AuthEval study", "records in the lake (no images table)"


def _model_names(inputs: ReportInputs) -> list[str]:
    names = [r["model"] for part in ("vlm_models", "probe_models", "model_runs") for r in inputs.rows(part) if r.get("model")]
    return list(dict.fromkeys(names))


def _model_mechanisms(inputs: ReportInputs) -> list[str]:
    return [r["mechanism"] for r in inputs.rows("mechanisms") if r.get("source") == "model"]


def _tiny_models(inputs: ReportInputs) -> list[str]:
    """The tiny random models (models/tiny.py) behind model mechanisms, by their names in the lake."""
    if not _model_mechanisms(inputs):
        return []
    names = [m.split("@")[0] for m in _model_names(inputs)]
    return list(dict.fromkeys(m for m in names if m.startswith(TINY_MODEL_PREFIX)))


def _words_of_level(level: str | None) -> str:
    return LEVEL_WORDS.get(level or "", level or "unknown level")


def _not_reported(entry: dict, metrics=KEY_METRICS, unit: str = "image_weighted") -> list[tuple[str, str, str]]:
    """(metric, status words, reason) of each number the record does not support, in metric order."""
    out = []
    for metric in metrics:
        row = entry.get((unit, metric))
        if row is not None and (not row.get("available", True) or row.get("estimate") is None) and row.get("status"):
            out.append((METRIC_WORDS.get(metric, metric), STATUS_WORDS.get(row["status"], row["status"]),
                        row.get("reason") or ""))
    return out


LEVEL_CLAUSE = {
    "full_counterfactual": "full counterfactual record: supports p, delta and Delta",
    "role_separated": "role-separated record: supports p and J only, not J_auth, delta or Delta",
    "proposal_only": "proposal-only record: supports none of p, delta and Delta",
}


def _known(row: dict | None) -> bool:
    return row is not None and row.get("available", True) and row.get("estimate") is not None


def analysis_paragraph(analysis: str, entry: dict) -> Text:
    """What p, delta and Delta say for one analysis, in plain words: units, direction, whether the
    record supports each number, and whether the gap's interval excludes zero."""
    img = lambda metric: entry.get(("image_weighted", metric))  # noqa: E731
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
        head.append(f"{size.get('n')} images in {size.get('n_clusters')} clusters" if size.get("n")
                    else f"{size.get('n_clusters')} clusters")
    parts: list = [("b", analysis), " (" + "; ".join(head) + "). "]
    if _known(p):
        parts.append(f"The review changed the proposal on p = {_pct(p['estimate'])} of images "
                     f"[{_pct(p.get('ci_lower'))}, {_pct(p.get('ci_upper'))}]. ")
    if _known(d):
        direction = ("the proposal would have scored higher than the action taken" if d["estimate"] > 0 else
                     "the action taken scored higher than the proposal would have" if d["estimate"] < 0 else
                     "the action taken scored as the proposal would have")
        parts.append(f"Where it changed it, {direction}: delta = {_cell(d)} local-utility points per changed image. ")
    if _known(gap) and _known(p) and p["estimate"] == 0:
        parts.append("No proposal was changed, so Delta = 0 by identification and delta is undefined. ")
    elif _known(gap):
        clustered = f"; cluster-equal {_cell(gap_c)}" if gap_c is not None else ""
        parts.append(f"Over all images, Delta = p \u00d7 delta = {_cell(gap)} points per image (image-weighted"
                     f"{clustered}). ")
        scores = (f" (J_auth = {_num(j_auth['estimate'])} against J = {_num(j['estimate'])})"
                  if _known(j) and _known(j_auth) else "")
        if gap["estimate"] > 0:
            meaning = f"under the same local rule the proposal alone scores higher than the executed workflow{scores}"
            verdict = "a proposal-level evaluation overstates this workflow"
        elif gap["estimate"] < 0:
            meaning = f"the review's changes raised the local score above the proposal's{scores}"
            verdict = "a proposal-level evaluation understates this workflow"
        else:
            meaning, verdict = f"the proposal and the executed workflow score the same{scores}", ""
        sign = "positive" if gap["estimate"] > 0 else "negative" if gap["estimate"] < 0 else "zero"
        zero = _excludes_zero(gap)
        if zero is True and verdict:
            parts.append(f"The gap is {sign} and its 95% interval excludes zero: {meaning}, so {verdict}. ")
        elif zero is False:
            parts.append(f"The point estimate is {sign} ({meaning}), but its 95% interval includes zero: the record "
                         "does not show a gap in either direction at this sample size. ")
        else:
            parts.append(f"The gap is {sign}: {meaning}" + (f", so {verdict}" if verdict else "") + ". ")
    missing = _not_reported(entry)
    if missing:
        said = "; ".join(f"{m} {status} ({reason})" if reason else f"{m} {status}" for m, status, reason in missing)
        parts.append(f"Not reported as numbers: {said}.")
    return Text(parts)


@dataclass
class Document:
    """The report laid out once: title, the lede under it, the sections in reading order."""

    title: str
    lede: list[Text]
    sections: list[Section]

    def images(self) -> dict[str, bytes]:
        """The PNG files the Markdown names, by file name (written beside report.md)."""
        return {b.file: b.png for s in self.sections for b in s.blocks if isinstance(b, Image)}


def build_report(inputs: ReportInputs) -> Document:
    """The report's title, lede and sections from what the lake holds."""
    study, source = _study_of(inputs)
    entries = _by_analysis(inputs)
    tiny_mechanisms = set(_model_mechanisms(inputs)) if _tiny_models(inputs) else set()
    for row in inputs.rows("analyses"):
        if row.get("mechanism") in tiny_mechanisms and row["analysis"] in entries:
            entries[row["analysis"]]["tiny"] = True
    title = f"{study}: authority-preserving evaluation"
    lede = [Text([("b", "Study:"), f" {study}. ", ("b", "Source:"), f" {source}. ", ("b", "Analyses:"),
                  f" {len(entries)} in {len({e.get('study') for e in entries.values()})} group(s). ",
                  ("b", "Written by"), f" autheval {__version__}"
                  + (f", run {inputs.lake['run_id']}" if inputs.lake.get("run_id") else "")
                  + (f", {inputs.lake['written_at']}" if inputs.lake.get("written_at") else "") + "."])]
    if inputs.note:
        lede.append(Text([inputs.note], "note"))
    if source == STUDY_NAMES["synthetic"][1]:
        lede.append(Text(["The cohort is synthetic: its images and labels are generated, so every number here "
                          "shows the method at work, not a clinical result."], "callout"))
    tiny = _tiny_models(inputs)
    if tiny:
        lede.append(Text([("b", "Tiny models."), " The model mechanisms (" + ", ".join(_model_mechanisms(inputs))
                          + ") come from tiny random models (" + ", ".join(tiny) + ") run on the real code path: "
                          "their proposals are random, so their numbers test the pipeline and say nothing about "
                          "any real model."], "callout"))
    sections = [
        _summary_section(inputs, entries), _decomposition_section(entries), _levels_section(entries),
        _forest_section(inputs), _contrasts_section(inputs), _subgroups_section(inputs), _trend_section(inputs),
        _monitoring_section(inputs), _items_section(inputs, entries), _provenance_section(inputs),
    ]
    return Document(title, lede, sections)


def _section(key: str, blocks: list) -> Section:
    return Section(SECTION_TITLES[key], key, blocks)


def _summary_section(inputs: ReportInputs, entries: dict) -> Section:
    blocks: list = [Text(["How to read: p is the share of images whose proposal the review changed; delta and Delta "
                          "are points of the declared local utility U_z (0 for the reference action, negative for "
                          "under- or over-escalation). delta = U_z(proposal) - U_z(selected) averaged over the changed "
                          "images; Delta = J_auth - J = p \u00d7 delta per image, where J is the executed workflow's mean "
                          "local score and J_auth the proposal's under the same rule. A positive gap means a "
                          "proposal-level evaluation overstates the workflow, a negative one that it understates it. "
                          "Brackets are 95% whole-cluster bootstrap intervals."], "note")]
    if not entries:
        blocks.append(Text(["The lake holds no estimates: there is nothing to report yet."]))
    blocks += [analysis_paragraph(analysis, entry) for analysis, entry in entries.items()]
    return _section("summary", blocks)


def _metric_rows(entries: dict, metrics: tuple[str, ...], product: bool) -> list[list]:
    rows = []
    for analysis, entry in entries.items():
        for unit in ("image_weighted", "cluster_equal"):
            if not any((unit, m) in entry for m in metrics):
                continue
            cells = [_cell(entry.get((unit, m))) for m in metrics]
            if product:
                p, d = entry.get((unit, "intervention_rate")), entry.get((unit, "delta"))
                known = unit == "image_weighted" and p and d and p.get("estimate") is not None and d.get("estimate") is not None
                cells.append(_num(p["estimate"] * d["estimate"]) if known else "NA")
            rows.append([analysis, unit.replace("_", "-"), *cells])
    return rows


def _decomposition_section(entries: dict) -> Section:
    blocks: list = [Text(["Each cell is the estimate with its 95% interval in brackets, or the reason it is not a "
                          "number. J and J_auth are the mean local scores of the executed action and of the proposal; "
                          "the last column repeats Delta from its parts (image-weighted)."], "note")]
    rows = _metric_rows(entries, KEY_METRICS, product=True)
    blocks.append(Table(["analysis", "unit", *[METRIC_WORDS.get(m, m) for m in KEY_METRICS], "p \u00d7 delta"], rows,
                        numbers=True) if rows else Text(["No estimates in the lake."]))
    if any(e.get(("image_weighted", m), {}).get("available") for e in entries.values() for m in GLOBAL_METRICS):
        blocks.append(Heading("Against the benchmark score"))
        blocks.append(Text(["J_std is the proposal's global (benchmark) score, the same for every service; "
                            "Delta_total = J_std - J = Delta_utility + Delta splits the benchmark's distance from the "
                            "workflow into the local rule's share (Delta_utility = J_std - J_auth) and authority's "
                            "(Delta)."], "note"))
        blocks.append(Table(["analysis", "unit", *GLOBAL_METRICS], _metric_rows(entries, GLOBAL_METRICS, product=False),
                            numbers=True))
    return _section("decomposition", blocks)


def _levels_section(entries: dict) -> Section:
    rows = []
    for analysis, entry in entries.items():
        level = entry.get("level")
        missing = _not_reported(entry, KEY_METRICS + GLOBAL_METRICS)
        said = "; ".join(f"{m}: {status}" + (f" ({reason})" if reason else "") for m, status, reason in missing)
        rows.append([analysis, _words_of_level(level), LEVEL_SUPPORTS.get(level or "", "as its statuses say"),
                     said or "every number is reported"])
    blocks: list = [Text(["The record level decides what may be reported: proposal-only recovers nothing; "
                          "role-separated recovers p and J; full counterfactual recovers J_auth, Delta and delta "
                          "(when p > 0). A number the record cannot support is reported as not recoverable with "
                          "the reason, never as a number."], "note")]
    blocks.append(Table(["analysis", "record level", "supports", "not reported as numbers"], rows)
                  if rows else Text(["No estimates in the lake."]))
    return _section("levels", blocks)


def _forest_section(inputs: ReportInputs) -> Section:
    groups = [g for g, s, _ in _forest_groups(inputs.summary, inputs.contrasts) if s]
    blocks: list = [Text(["One panel per group (" + ", ".join(groups or ["none"]) + "): the authority gap of each "
                          "analysis in both units with its 95% interval, and the group's paired contrasts when there "
                          f"are at most {MAX_PLOTTED_CONTRAST_ROWS} (more are in the table below)."], "note"),
                    Image("forest_plot.png", forest_plot_png(inputs.summary, inputs.contrasts),
                          "forest plots of the authority gaps by group")]
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
        text = [("b", f"{len(kept)} of {len(rows)} paired contrasts exclude zero after the Holm adjustment"),
                " within their family (the headline flag; a difference is the first arm's Delta minus the "
                "second's on the same clusters)"]
        text.append(f"; {raw} exclude zero on the raw interval" + (f", {lost} of which do not survive the adjustment"
                                                                  if lost else "") + ".")
        blocks.append(Text(text))
        for r in kept[:6]:
            blocks.append(Text([("b", r["contrast"]), f" ({r['unit'].replace('_', '-')}): difference "
                                f"{_num(r['difference'])} [{_num(r['ci_lower'])}, {_num(r['ci_upper'])}] local-utility "
                                f"points per image, Holm p = {_num(r['p_adjusted'], 4, False)} over "
                                f"{r['family_size']} test(s) of family {r['family']}."]))
        if len(kept) > 6:
            blocks.append(Text([f"... and {len(kept) - 6} more in the table."]))
    else:
        blocks.append(Text(["This lake's contrasts carry no multiplicity adjustment: the flag below is the raw "
                            "interval's, one test at a time."]))
    shown = contrast_rows(contrasts)
    blocks.append(Text([CONTRAST_NOTE], "note"))
    blocks.append(_arrow_table(shown))
    return _section("contrasts", blocks)


def _arrow_table(table: pa.Table, collapsed: str | None = None) -> Table:
    cols = [c for c in table.column_names if c not in ("scheme", "reps", "seed", "analysis_order")]
    return Table(cols, [[r[c] for c in cols] for r in table.to_pylist()], collapsed)


def _rows_table(rows: list[dict], columns: list[str], collapsed: str | None = None, numbers: bool = False) -> Table:
    return Table(columns, [[r.get(c) for c in columns] for r in rows], collapsed, numbers)


def _absent(table: str) -> Text:
    return Text([f"This lake has no {table} table."])


def _subgroups_section(inputs: ReportInputs) -> Section:
    blocks: list = []
    if not inputs.has("subgroups"):
        blocks.append(_absent("subgroups") if "subgroups" not in inputs.columns else
                      Text(["This lake's subgroups table lacks columns the report reads (the adjusted flag among them)."]))
    elif not inputs.rows("subgroups"):
        blocks.append(Text(["The subgroups table has no rows: the evaluated records join no subgroup attributes "
                            "(sex, age, site, profile) in this lake."]))
    else:
        rows = inputs.rows("subgroups")
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
        blocks.append(Text([f"The authority gap (image-weighted) within each group of {len(summary)} grouping(s), per "
                            f"analysis: {len(gaps)} group estimates and {len(small)} groups too small to estimate. ",
                            ("b", f"{len(flagged)} group gaps exclude zero after the Holm adjustment"),
                            " over their family (every group of one analysis, unit and metric)."]))
        blocks.append(Table(["grouping", "groups", "group estimates", "too small", "exclude zero (Holm-adjusted)",
                             "exclude zero (unadjusted)"],
                            [[g, len(s["groups"]), s["estimable"], s["small"], s["adj"], s["raw"]] for g, s in summary.items()]))
        if flagged:
            blocks.append(Heading("Group gaps that exclude zero after adjustment"))
            blocks.append(_rows_table([{**r, "Delta [95% CI]": _cell(r)} for r in flagged],
                                      ["analysis", "grouping", "group_value", "n_images", "n_clusters", "Delta [95% CI]",
                                       "p_adjusted", "q_value", "family_size"]))
        blocks.append(_rows_table([{**r, "Delta [95% CI]": _cell(r)} for r in gaps],
                                  ["analysis", "grouping", "group_value", "n_images", "n_clusters", "accuracy_proposal",
                                   "accuracy_selected", "Delta [95% CI]", "p_adjusted", "excludes_zero_adjusted"],
                                  collapsed=f"Every group's gap ({len(gaps)} rows)", numbers=True))
        if small:
            blocks.append(_rows_table(small, ["analysis", "grouping", "group_value", "n_images", "n_clusters", "reason"],
                                      collapsed=f"Groups too small to estimate ({len(small)} rows)"))
    blocks.append(Heading("Fairness"))
    if not inputs.has("fairness"):
        blocks.append(_absent("fairness"))
    elif not inputs.rows("fairness"):
        blocks.append(Text(["The fairness table has no rows."]))
    else:
        rows = inputs.rows("fairness")
        blocks.append(Text(["Per analysis and grouping: the worst group and the lowest to highest group accuracy "
                            "(exact action level) of the proposal and of the selected action; fairness is their "
                            "ratio (1 = equally accurate in every group)."], "note"))
        for role in ("proposal", "selected"):
            known = [r for r in rows if r.get(f"fairness_{role}") is not None]
            if known:
                low = min(known, key=lambda r: r[f"fairness_{role}"])
                blocks.append(Text([f"Least fair for the {'proposal' if role == 'proposal' else 'selected action'}: ",
                                    ("b", f"{_num(low[f'fairness_{role}'], 3, False)}"),
                                    f" in {low['analysis']} by {low['grouping']} (worst group "
                                    f"{low[f'worst_group_{role}']})."]))
        shown = [{"analysis": r["analysis"], "grouping": r["grouping"], "groups": r["n_groups"],
                  **{f"{role}: {label}": value for role in ("proposal", "selected") for label, value in (
                      ("worst group", r[f"worst_group_{role}"]),
                      ("accuracy", f"{_num(r[f'min_accuracy_{role}'], 3, False)} to "
                                   f"{_num(r[f'max_accuracy_{role}'], 3, False)}"),
                      ("fairness", r[f"fairness_{role}"]))}} for r in rows]
        blocks.append(_rows_table(shown, list(shown[0]), numbers=True,
                                  collapsed=f"Fairness of every analysis and grouping ({len(shown)} rows)"
                                  if len(shown) > 12 else None))
    return _section("subgroups", blocks)


def _trend_section(inputs: ReportInputs) -> Section:
    if not inputs.has("trend"):
        return _section("trend", [Text(["This lake has no trend table: nothing has been monitored. Role-separated "
                                        "or full logs dropped in the landing folder are re-evaluated to date and per "
                                        "period, with intervals, and reported here."])])
    rows = inputs.rows("trend")
    if not rows:
        return _section("trend", [Text(["The trend table has no rows: no landed log yet."])])
    blocks: list = [Text(["Each landed log is pooled by record level; 'all' is every log to date. A number a pool's "
                          "record cannot support is reported as not recoverable with the reason."], "note")]
    blocks.append(_rows_table([{**r, "estimate [95% CI]": _cell(r, pct=r["metric"] == "intervention_rate"),
                                "metric": METRIC_WORDS.get(r["metric"], r["metric"]),
                                "unit": r["unit"].replace("_", "-")} for r in rows],
                              ["pool", "period", "unit", "metric", "estimate [95% CI]", "n", "n_clusters", "status",
                               "reason"], numbers=True))
    gap_rows = [r for r in rows if r["metric"] == "Delta_authority" and r["unit"] == "image_weighted"]
    if gap_rows:
        blocks.append(Image("report_trend.png", _trend_png(rows), "the authority gap per period"))
    return _section("trend", blocks)


def _trend_png(rows: list[dict]) -> bytes:
    from autheval.monitoring.landing import trend_plot_table

    return trend_plot_png(trend_plot_table(pa.Table.from_pylist(rows)))


MONITOR_ABSENT = ("Nothing is monitored in this lake yet. Declare an acceptance protocol (`autheval protocol show` "
                  "prints the default; `autheval protocol check FILE` validates yours), drop each month's logs in "
                  "<lake>/landing/ and run `autheval monitor run --lake DIR`: every site x model version x rule then "
                  "gets a status here, look by look.")


def _bounds_words(row: dict) -> str:
    lower, upper = row.get("lower"), row.get("upper")
    return f"[{'-inf' if lower is None else f'{lower:g}'}, {'inf' if upper is None else f'{upper:g}'}]"


def _band(row: dict, lower: str, upper: str) -> str:
    if row.get(lower) is None or row.get(upper) is None or row[lower] != row[lower]:
        return "NA"
    return f"[{row[lower]:+.4f}, {row[upper]:+.4f}]"


def _rule_words(row: dict) -> str:
    return f"{METRIC_WORDS.get(row['metric'], row['metric'])} ({row['unit'].replace('_', '-')})"


def _monitoring_section(inputs: ReportInputs) -> Section:
    """The monitor's status table (latest look of every site x model version x rule), the alerts, the
    per-site picture and the case-mix shifts; the empty state when nothing has landed."""
    if not inputs.has("monitor_latest"):
        why = ("This lake has no monitor table. " if "monitor" not in inputs.columns else
               "This lake's monitor table lacks columns the report reads (an older lake). ")
        return _section("monitoring", [Text([why + MONITOR_ABSENT])])
    latest = inputs.rows("monitor_latest")
    if not latest:
        return _section("monitoring", [Text(["The monitor table has no rows: no landed log yet. " + MONITOR_ABSENT])])
    alerts = [r for r in latest if r["status"] == "alert"]
    counts = {s: sum(r["status"] == s for r in latest) for s in ("alert", "pass", "insufficient")}
    blocks: list = [Text([
        "Each site x model version (and every site pooled: 'all') is watched look by look against the declared "
        "protocol's rules with an anytime-valid confidence sequence (valid at every look at once, lesion clusters "
        "as units), drawn at the level the multiplicity correction gives; the fixed-sample bootstrap interval is "
        "beside it for reference only (acting on it every month would alarm falsely). ",
        ("b", f"{counts['alert']} alert, {counts['pass']} pass, {counts['insufficient']} insufficient"),
        f" at the latest look of {len(latest)} site x model version x rule series."], "note")]
    blocks.append(Heading("Alerts"))
    if alerts:
        blocks.append(Text([("b", f"{len(alerts)} series alert"), ": the confidence sequence lies wholly outside the "
                            "protocol's bounds at the latest look."], "callout"))
        blocks.append(_rows_table([{**r, "rule": _rule_words(r), "bounds": _bounds_words(r),
                                    "confidence sequence": _band(r, "cs_lower", "cs_upper")} for r in alerts],
                                  ["site", "model_version", "rule", "bounds", "period", "n_clusters", "estimate",
                                   "confidence sequence", "alert_since", "reason"], numbers=True))
    else:
        blocks.append(Text(["No site x model version x rule alerts at its latest look."]))
    blocks.append(Heading("Status at the latest look"))
    blocks.append(_rows_table([{**r, "rule": _rule_words(r), "bounds": _bounds_words(r),
                                "confidence sequence": _band(r, "cs_lower", "cs_upper"),
                                "fixed-sample 95% CI": _band(r, "ci_lower", "ci_upper"),
                                "level": r.get("alpha_adjusted")} for r in latest],
                              ["site", "model_version", "rule", "bounds", "period", "look", "n_clusters", "estimate",
                               "confidence sequence", "fixed-sample 95% CI", "level", "status"], numbers=True))
    series = inputs.rows("monitor_series")
    if series:
        blocks.append(Image("report_monitor.png", monitor_plot_png(series), "each site's confidence sequence, "
                            "fixed-sample interval and the protocol's bounds per look"))
    blocks.append(Heading("Case mix"))
    mix = inputs.rows("monitor_case_mix")
    if not inputs.has("monitor_case_mix"):
        blocks.append(_absent("monitor_case_mix"))
    elif not mix:
        blocks.append(Text(["The case-mix table has no rows."]))
    else:
        shifted = [r for r in mix if r["shifted"]]
        blocks.append(Text([("b", f"{len(shifted)} of {len(mix)} site x dimension case mixes have shifted"),
                            " against the site's baseline at the latest period (a sequential multinomial test, "
                            "anytime-valid). A shifted case mix changes what the gap means: read the gap of that "
                            "site beside it."]))
        if shifted:
            blocks.append(Heading("Case-mix shifts"))
            blocks.append(_rows_table(shifted, ["site", "dimension", "period", "shifted_since", "p_value", "shares"],
                                      numbers=True))
        blocks.append(_rows_table(mix, ["site", "dimension", "period", "shifted", "p_value", "shares", "reason"],
                                  collapsed=f"Every site's case mix at its latest period ({len(mix)} rows)"))
    return _section("monitoring", blocks)


def _sum(rows: list[dict], key: str) -> int:
    return sum(int(r.get(key) or 0) for r in rows)


def _item_ai_system(inputs: ReportInputs) -> str:
    mechanisms = inputs.rows("mechanisms")
    if not mechanisms:
        return TO_BE_SUPPLIED
    said = "; ".join(f"{r['mechanism']} (" + (f"source {r['source']}, " if r.get("source") else "")
                     + f"{r['images']} images)" for r in mechanisms)
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
        parts.append(f"{sum(by_split.values())} images held (" + ", ".join(f"{k} {v}" for k, v in by_split.items()) + ")")
    if evaluated:
        per_split: dict[str, int] = {}
        analyses = {r["analysis"] for r in evaluated}
        for r in evaluated:
            per_split[r["split"]] = max(per_split.get(r["split"], 0), r["images"])
        parts.append(f"records of {len(analyses)} analyses evaluate the " + ", ".join(
            f"{k} split ({v} images)" for k, v in per_split.items()))
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
    said = [f"{r['hash_kind']} pHash distance <= {r['threshold']} ({r['use']}): {r['components']} components of "
            f"{r['images']} images, {r['crossing_components']} crossing a split" for r in inputs.rows("duplicates")]
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
    said = (f"the record of proposal versus selection: {n} selections over {len({r['analysis'] for r in rows})} "
            "analyses; " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    overrides = inputs.rows("overrides")
    if overrides:
        by_reason: dict[str, list[int]] = {}
        for r in overrides:
            total = by_reason.setdefault(r["override"], [0, 0])
            total[0] += r["images"]
            total[1] += r["changed"]
        said += "; declared overrides: " + ", ".join(f"{k} {v[0]} ({v[1]} changed the proposal)"
                                                     for k, v in sorted(by_reason.items()))
    elif inputs.has("overrides"):
        said += "; no declared override"
    return said + "; what the user saw and how they were trained: " + TO_BE_SUPPLIED


def _item_errors(inputs: ReportInputs) -> str:
    rows = inputs.rows("error_cases")
    if not rows:
        return TO_BE_SUPPLIED
    keys = ("images", "proposal_under", "proposal_over", "selected_under", "selected_over", "review_fixed_wrong",
            "review_broke_correct")
    t = {k: _sum(rows, k) for k in keys}
    return (f"over {len(rows)} analyses and {t['images']} image-analyses against the reference action level: "
            f"proposals under-escalated {t['proposal_under']} and over-escalated {t['proposal_over']}; after review "
            f"{t['selected_under']} under and {t['selected_over']} over; review corrected {t['review_fixed_wrong']} "
            f"wrong proposals and changed {t['review_broke_correct']} correct ones (per analysis below); "
            "clinical harms: " + TO_BE_SUPPLIED)


def _item_subgroups(inputs: ReportInputs) -> str:
    rows = inputs.rows("subgroups")
    if not rows:
        return "no subgroup rows in this lake; " + TO_BE_SUPPLIED
    groupings = sorted({r["grouping"] for r in rows})
    flagged = sum(1 for r in rows if r.get("excludes_zero_adjusted"))
    fair = len(inputs.rows("fairness"))
    return (f"{len(groupings)} groupings ({', '.join(groupings)}); {flagged} group gaps exclude zero after "
            f"adjustment; {fair} fairness rows (see Subgroups and fairness)")


def _item_outcome(inputs: ReportInputs) -> str:
    rules = inputs.rows("rules")
    if rules:
        return "the declared local utility U_z of rules " + ", ".join(
            f"{r['rule_version']} (SHA-256 {r['rule_sha256']})" for r in rules)
    return "the local utility U_z of the records as logged; the rules' version and SHA-256 are not in this lake"


def _item_statistics(inputs: ReportInputs) -> str:
    schemes = _schemes(inputs)
    said = "; ".join(f"{s['scheme']} whole-cluster bootstrap ({s['interval_method']}), {s['reps']} replicates, seed "
                     f"{s['seed']}" for s in schemes) or "as the estimates table says"
    adjusted = inputs.contrasts is not None and "adjustment" in inputs.contrasts.column_names
    return said + ("; contrasts and subgroup gaps Holm-adjusted within each declared family, BH q-values beside"
                   if adjusted else "")


def _schemes(inputs: ReportInputs) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for r in inputs.rows("analyses"):
        key = (r["scheme"], r["interval_method"], r["reps"], r["seed"], r["quantile_lower"], r["quantile_upper"])
        seen.setdefault(key, {**r, "analyses": 0})["analyses"] += 1
    return list(seen.values())


def _items_section(inputs: ReportInputs, entries: dict) -> Section:
    sizes = [next((e[k] for k in (("image_weighted", "J"), ("image_weighted", "intervention_rate")) if k in e), None)
             for e in entries.values()]
    size_text = ("; ".join(sorted({f"{s.get('n')} images in {s.get('n_clusters')} clusters" for s in sizes if s}))
                 + "; units: image-weighted (primary) and cluster-equal") if any(sizes) else TO_BE_SUPPLIED
    missing = [f"{a}: {m} {status}" for a, e in entries.items() for m, status, _ in _not_reported(e)]
    software = f"autheval {__version__}" + (f", lake run {inputs.lake['run_id']}" if inputs.lake.get("run_id") else "")
    items = [
        ("AI system: name, version, how it proposes", "CONSORT-AI 5(i); TRIPOD+AI; DECIDE-AI", _item_ai_system(inputs)),
        ("Intended use, setting and target users", "CONSORT-AI 4a; TRIPOD+AI; DECIDE-AI", TO_BE_SUPPLIED),
        ("Input data: how acquired and selected", "CONSORT-AI 4a(ii), 5(ii); TRIPOD+AI", _item_inputs(inputs)),
        ("Poor-quality or unavailable inputs: what was excluded", "CONSORT-AI 5(iii); TRIPOD+AI",
         _item_exclusions(inputs)),
        ("Duplicates and leakage between splits", "TRIPOD+AI", _item_duplicates(inputs)),
        ("Human-AI interaction", "CONSORT-AI 5(iv); DECIDE-AI", _item_interaction(inputs)),
        ("Users: number, expertise, training", "CONSORT-AI 5(iv); DECIDE-AI", TO_BE_SUPPLIED),
        ("AI output and how it enters the decision", "CONSORT-AI 5(vi); DECIDE-AI",
         "a ranked slate led by a proposed action (a_head); the reviewer keeps or replaces it (a_sel), both logged"
         if inputs.rows("change_types") else TO_BE_SUPPLIED),
        ("Outcome and how it is scored", "TRIPOD+AI; CONSORT-AI 6a", _item_outcome(inputs)),
        ("Sample size and unit of analysis", "TRIPOD+AI; CONSORT-AI 7a", size_text),
        ("Statistical methods and multiplicity", "TRIPOD+AI; CONSORT-AI 12", _item_statistics(inputs)),
        ("Missing data: numbers the record cannot support",
         "TRIPOD+AI", "; ".join(missing) + " (reported as such, never as numbers)" if missing
         else "every number of every analysis is supported by its record"),
        ("Error cases", "CONSORT-AI 19; DECIDE-AI", _item_errors(inputs)),
        ("Subgroup results and fairness", "TRIPOD+AI; DECIDE-AI", _item_subgroups(inputs)),
        ("Safety, harms and adverse events", "DECIDE-AI; CONSORT-AI 19", TO_BE_SUPPLIED),
        ("Software, data and code availability", "CONSORT-AI 25; TRIPOD+AI", software + "; access: " + TO_BE_SUPPLIED),
        ("Protocol, registration, funding and conflicts", "CONSORT-AI 23-25; TRIPOD+AI", TO_BE_SUPPLIED),
    ]
    supplied = sum(1 for *_, v in items if v != TO_BE_SUPPLIED)
    blocks = [Text([f"What the lake can fill of the items these guidelines ask of AI evaluations ({supplied} of "
                    f"{len(items)} from the lake, in part or in full); the rest is marked \"{TO_BE_SUPPLIED}\"."], "note"),
              Table(["item", "asked by", "from this lake"], [list(i) for i in items], css="items")]
    interaction = _interaction_rows(inputs)
    if interaction:
        blocks.append(Heading("Human-AI interaction per analysis"))
        blocks.append(Text(["Selections by change type (none = the proposal kept), and declared overrides."], "note"))
        blocks.append(_rows_table(interaction, list(interaction[0])))
    if inputs.rows("error_cases"):
        blocks.append(Heading("Error cases per analysis"))
        blocks.append(Text(["Against the reference action level: under = below it (under-escalation), over = above "
                            "it; fixed = a wrong proposal replaced by the reference action, broke = a correct "
                            "proposal replaced."], "note"))
        blocks.append(_rows_table(inputs.rows("error_cases"), ["analysis", "images", "proposal_under", "proposal_over",
                                                               "selected_under", "selected_over", "review_fixed_wrong",
                                                               "review_broke_correct"]))
    return _section("items", blocks)


def _interaction_rows(inputs: ReportInputs) -> list[dict]:
    """Per analysis: selections by change type and the declared overrides (one row each)."""
    kinds = sorted({r["change_type"] for r in inputs.rows("change_types")})
    rows: dict[str, dict] = {}
    for r in inputs.rows("change_types"):
        rows.setdefault(r["analysis"], {"analysis": r["analysis"], **{k: 0 for k in kinds}})[r["change_type"]] = r["images"]
    if inputs.has("overrides"):
        for row in rows.values():
            row["overrides"], row["overrides that changed the proposal"] = 0, 0
        for r in inputs.rows("overrides"):
            if r["analysis"] in rows:
                rows[r["analysis"]]["overrides"] += r["images"]
                rows[r["analysis"]]["overrides that changed the proposal"] += r["changed"]
    return list(rows.values())


def _provenance_section(inputs: ReportInputs) -> Section:
    lake = inputs.lake
    blocks: list = [Heading("This report")]
    run = [["software", f"autheval {__version__}"],
           ["this run", lake.get("run_id") or "no open run (written outside a lake run)"],
           ["written at", lake.get("written_at") or "NA"]]
    if lake.get("snapshot"):
        run += [["served snapshot before this run", f"{lake['snapshot']} (run {lake.get('snapshot_run_id')}, committed "
                 f"{lake.get('committed_at')}, {lake.get('software') or 'software not named'})"]]
    else:
        run += [["served snapshot before this run", "none (this run makes the lake's first snapshot)"]]
    blocks.append(Table(["", ""], run))
    blocks.append(Heading("Estimation"))
    schemes = _schemes(inputs)
    if schemes:
        blocks.append(_rows_table(schemes, ["scheme", "interval_method", "reps", "seed", "quantile_lower",
                                            "quantile_upper", "analyses"]))
    else:
        first = inputs.summary.to_pylist()[0] if inputs.summary.num_rows else {}
        blocks.append(Text([f"Scheme {first.get('scheme')}, {first.get('reps')} whole-cluster bootstrap replicates "
                            "(the estimates' provenance columns are not in this lake)."]))
    blocks.append(Heading("Rules"))
    if inputs.rows("rules"):
        blocks.append(_rows_table(inputs.rows("rules"), list(inputs.rows("rules")[0])))
    else:
        blocks.append(Text(["No declared rules in this lake (no contexts table): the records' local scores are used as "
                            "logged (the reference study's come from the published traces)."]))
    blocks.append(Heading("Analyses: record, mechanism and data hash"))
    if inputs.rows("analyses"):
        wanted = ["study", "analysis", "record_level", "mechanism", "source", "data_sha256", "rule_version", "rule_sha256",
                  "engine", "software_version"]
        blocks.append(_rows_table(inputs.rows("analyses"), [c for c in wanted if c in inputs.rows("analyses")[0]]))
    else:
        blocks.append(Text(["The estimates carry no per-analysis provenance in this lake."]))
    blocks.append(Heading("Mechanisms and models"))
    if inputs.rows("mechanisms"):
        wanted = ["mechanism", "source", "producer", "producer_sha256", "images"]
        blocks.append(_rows_table(inputs.rows("mechanisms"), [c for c in wanted if c in inputs.rows("mechanisms")[0]]))
    for part, cols in (("vlm_models", ["model", "revision", "backend", "method", "device", "dtype", "images", "prompts"]),
                       ("probe_models", ["model", "images"]),
                       ("model_runs", ["trainer", "mechanism", "model", "model_revision", "data_sha256", "seed"])):
        if inputs.rows(part):
            blocks.append(_rows_table(inputs.rows(part), cols))
    if not _model_names(inputs):
        blocks.append(Text(["No model ran in the lake: every mechanism's proposals were given (a file or the "
                            "published heads)."]))
    if inputs.rows("input_files"):
        blocks.append(Heading("Input files"))
        blocks.append(_rows_table(inputs.rows("input_files"), ["name", "location", "sha256", "expected_sha256", "rows"]))
    missing = [f"{table}.{name}" for table, names in PROVENANCE_FIELDS.items() if table in inputs.columns
               for name in names if name not in inputs.columns[table]]
    if missing:
        blocks.append(Heading("Not in the lake"))
        blocks.append(Text(["Provenance these tables do not carry yet: " + ", ".join(missing) + "."]))
    return _section("provenance", blocks)


# --- rendering ---------------------------------------------------------------------------------------

def _document(report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None, note: str | None) -> Document:
    if isinstance(report, Document):
        return report
    if not isinstance(report, ReportInputs):  # an older caller: the summary table with its contrasts
        report = ReportInputs(summary=report, contrasts=contrasts, note=note)
    return build_report(report)


def _md_text(value) -> str:
    """A lake value as Markdown text: markup escaped, one line."""
    return html.escape(re.sub(r"\s+", " ", str(value)), quote=False)


def _md_cell(value) -> str:
    return _md_text(_fmt(value)).replace("|", "\\|")


def _md_parts(parts: list) -> str:
    out = []
    for part in parts:
        if isinstance(part, tuple):
            style, text = part
            text = _md_text(text)
            out.append(f"**{text}**" if style == "b" else f"`{text.replace('`', chr(39))}`")
        else:
            out.append(_md_text(part))
    return "".join(out).strip()


def markdown_report(report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None = None,
                    provenance: str | None = None) -> str:
    """The report as Markdown (the plots are the PNG files beside it). `report`: a built report, its
    inputs, or (older callers) the study_summary table with `contrasts` and a provenance line."""
    doc = _document(report, contrasts, provenance)
    title, lede, sections = doc.title, doc.lede, doc.sections
    lines = [f"# {_md_text(title)}", ""]
    for text in lede:
        lines += [("> " if text.kind == "callout" else "") + _md_parts(text.parts), ""]
    lines += ["Contents: " + " · ".join(f"[{s.title}](#{s.anchor})" for s in sections), ""]
    for section in sections:
        lines += [f"## {_md_text(section.title)}", ""]
        for block in section.blocks:
            if isinstance(block, Heading):
                lines += [f"### {_md_text(block.title)}", ""]
            elif isinstance(block, Text):
                lines += [("> " if block.kind == "callout" else "") + _md_parts(block.parts), ""]
            elif isinstance(block, Image):
                lines += [f"![{_md_text(block.alt)}]({block.file})", ""]
            elif isinstance(block, Table):
                if block.collapsed:
                    lines += [f"*{_md_text(block.collapsed)}:*", ""]
                lines += ["| " + " | ".join(_md_cell(c) for c in block.columns) + " |", "|" + "---|" * len(block.columns)]
                lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
                lines.append("")
    return "\n".join(lines)


STYLE = (
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0 auto;max-width:1150px;"
    "padding:1.5em 2em;color:#1d1d1f;line-height:1.45}"
    "h1{font-size:1.7em;margin-bottom:.3em}h2{font-size:1.3em;border-bottom:2px solid #dde3ea;padding-bottom:.2em;"
    "margin-top:1.8em}h3{font-size:1.05em;margin-top:1.3em}"
    "nav{background:#f5f7fa;border:1px solid #dde3ea;padding:.5em .9em;font-size:13px}nav a{margin-right:1.1em}"
    "p{margin:.45em 0}.note{color:#555;font-size:13px}"
    ".callout{background:#fff6e0;border-left:4px solid #e0a100;padding:.5em .8em}"
    "table{border-collapse:collapse;font-size:12.5px;margin:.5em 0 1em}"
    "td,th{border:1px solid #ccd3db;padding:3px 7px;text-align:right;vertical-align:top}"
    "th{background:#eef2f6;text-align:left}td.text{text-align:left;overflow-wrap:anywhere}"
    "tr:nth-child(even) td{background:#fafbfc}.scroll{overflow-x:auto;max-width:100%}"
    "table.numbers td{white-space:nowrap}table.numbers td:first-child{white-space:normal}"
    "td.todo{color:#8a6d00;font-style:italic}"
    "details{margin:.4em 0 1em}summary{cursor:pointer;color:#2a5db0}"
    "img{max-width:100%;border:1px solid #e3e7ec}code{font-size:12px}"
    ".items td{text-align:left}.items td:last-child{max-width:640px}"
    "td.hash{font-family:monospace;font-size:11px;word-break:break-all;text-align:left;min-width:12em}"
)


def _html_parts(parts: list) -> str:
    out = []
    for part in parts:
        if isinstance(part, tuple):
            style, text = part
            tag = "strong" if style == "b" else "code"
            out.append(f"<{tag}>{html.escape(str(text))}</{tag}>")
        else:
            out.append(html.escape(str(part)))
    return "".join(out).strip()


_HASH = re.compile(r"^[0-9a-f]{40,64}$")


def _html_table(block: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in block.columns)
    head = f"<tr>{head}</tr>" if any(block.columns) else ""

    def cell(value) -> str:
        text = _fmt(value)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool) or text[:1] in "+-" or text == "NA"
        kind = ("todo" if text.startswith(TO_BE_SUPPLIED) else "hash" if _HASH.match(text) else
                "" if numeric else "text")
        return f"<td{f' class={kind}' if kind else ''}>{html.escape(text)}</td>"

    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in block.rows)
    classes = " ".join(c for c in (block.css, "numbers" if block.numbers else "") if c)
    table = f"<div class=scroll><table{f' class={chr(39)}{classes}{chr(39)}' if classes else ''}>{head}{body}</table></div>"
    if block.collapsed:
        return f"<details><summary>{html.escape(block.collapsed)}</summary>{table}</details>"
    return table


def html_report(report: Document | ReportInputs | pa.Table, contrasts: pa.Table | None = None,
                provenance: str | None = None) -> str:
    """The report as one self-contained HTML page: inline CSS, plots as data URIs, no script, no link
    off the page; every lake value escaped. Arguments as markdown_report's."""
    doc = _document(report, contrasts, provenance)
    title, lede, sections = doc.title, doc.lede, doc.sections
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    for text in lede:
        parts.append(f"<p class='{text.kind}'>{_html_parts(text.parts)}</p>")
    parts.append("<nav>" + "".join(f"<a href='#{s.anchor}'>{html.escape(s.title)}</a>" for s in sections) + "</nav>")
    for section in sections:
        parts.append(f"<section id='{section.anchor}'><h2>{html.escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Heading):
                parts.append(f"<h3>{html.escape(block.title)}</h3>")
            elif isinstance(block, Text):
                parts.append(f"<p class='{block.kind}'>{_html_parts(block.parts)}</p>")
            elif isinstance(block, Image):
                data = base64.b64encode(block.png).decode()
                parts.append(f"<img alt='{html.escape(block.alt)}' src='data:image/png;base64,{data}'>")
            elif isinstance(block, Table):
                parts.append(_html_table(block))
        parts.append("</section>")
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
    fig, axes = plt.subplots(len(sites), len(rules), figsize=(5.6 * len(rules), 2.7 * len(sites) + 0.5), dpi=100,
                             squeeze=False)
    for i, site in enumerate(sites):
        for j, rule in enumerate(rules):
            ax = axes[i, j]
            looks = sorted((r for r in series if r["site"] == site
                            and (r["metric"], r["unit"], r["lower"], r["upper"]) == rule), key=lambda r: r["look"])
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
    ax.fill_between(x, values("cs_lower"), values("cs_upper"), color="#1f77b4", alpha=0.25, lw=0,
                    label="confidence sequence (anytime-valid)")
    known = ~np.isnan(lo) & ~np.isnan(hi) & ~np.isnan(estimate)
    if known.any():
        ax.errorbar(x[known], estimate[known], yerr=[estimate[known] - lo[known], hi[known] - estimate[known]],
                    fmt="none", ecolor="#ff7f0e", elinewidth=1.2, capsize=2, label="fixed-sample 95% interval")
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
    ax.set_title(_mathtext_safe(f"{'all sites' if site == 'all' else site}: {METRIC_WORDS.get(metric, metric)} "
                                f"({unit.replace('_', '-')}), latest {looks[-1]['status']}"), fontsize=9, loc="left")
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
