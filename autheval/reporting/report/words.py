"""What the section builders share: the words for sections, metrics, statuses and record levels, a
number or an estimate as a cell, the reads of the inputs several sections make (models, schemes), and
the small table helpers; one place so every section words a number the same way.
"""

from __future__ import annotations

import pyarrow as pa

from autheval.reporting.report.document import ReportInputs, Section, Table, Text

SECTION_TITLES = {
    "summary": "What the numbers say",
    "decomposition": "Decomposition: J, J_auth, p, delta, Delta",
    "levels": "Record levels and what they support",
    "forest": "Forest plots by regime",
    "contrasts": "Paired contrasts",
    "subgroups": "Subgroups and fairness",
    "benchmark": "Benchmark and transfer",
    "trend": "Trend",
    "monitoring": "Monitoring a deployment",
    "acceptance": "Acceptance criteria, declared in advance",
    "items": "Reporting items (CONSORT-AI, DECIDE-AI, TRIPOD+AI)",
    "provenance": "Provenance",
}

TINY_MODEL_PREFIX = "tiny-"

LEVEL_WORDS = {
    "full_counterfactual": "full counterfactual",
    "role_separated": "role-separated",
    "proposal_only": "proposal-only",
}

METRIC_WORDS = {"intervention_rate": "p", "Delta_authority": "Delta"}
KEY_METRICS = ("J", "J_auth", "intervention_rate", "delta", "Delta_authority")
GLOBAL_METRICS = ("J_std", "Delta_utility", "Delta_total")
STATUS_WORDS: dict[str | None, str] = {
    "not_recoverable": "not recoverable",
    "undefined": "undefined",
    "not_supplied": "not supplied",
}


# Groupings the lake estimated rather than recorded, by the name the report shows them under (the words
# sql/estimates/fairness_summary.sql uses too), and what the estimate is.
ESTIMATED_GROUPINGS = {"ita_category": "ita_category (estimated)"}
ESTIMATED_NOTE = (
    "ita_category (estimated) is the skin tone estimated from each image's pixels (the individual typology "
    "angle of the skin around the lesion, binned into six categories), not a recorded attribute: its groups "
    "are estimates, and an image may sit in the wrong one."
)


def _grouping(name):
    """A grouping as the report shows it: an estimated one says so wherever it appears."""
    return ESTIMATED_GROUPINGS.get(name, name)


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


def _known(row: dict | None) -> bool:
    return row is not None and row.get("available", True) and row.get("estimate") is not None


def _words_of_level(level: str | None) -> str:
    return LEVEL_WORDS.get(level or "", level or "unknown level")


def _not_reported(entry: dict, metrics=KEY_METRICS, unit: str = "image_weighted") -> list[tuple[str, str, str]]:
    """(metric, status words, reason) of each number the record does not support, in metric order."""
    out = []
    for metric in metrics:
        row = entry.get((unit, metric))
        if row is not None and (not row.get("available", True) or row.get("estimate") is None) and row.get("status"):
            out.append(
                (
                    METRIC_WORDS.get(metric, metric),
                    STATUS_WORDS.get(row["status"], row["status"]),
                    row.get("reason") or "",
                )
            )
    return out


def _model_names(inputs: ReportInputs) -> list[str]:
    names = [
        r["model"] for part in ("vlm_models", "probe_models", "model_runs") for r in inputs.rows(part) if r.get("model")
    ]
    return list(dict.fromkeys(names))


def _model_mechanisms(inputs: ReportInputs) -> list[str]:
    return [r["mechanism"] for r in inputs.rows("mechanisms") if r.get("source") == "model"]


def _tiny_models(inputs: ReportInputs) -> list[str]:
    """The tiny random models (models/tiny.py) behind model mechanisms, by their names in the lake."""
    if not _model_mechanisms(inputs):
        return []
    names = [m.split("@")[0] for m in _model_names(inputs)]
    return list(dict.fromkeys(m for m in names if m.startswith(TINY_MODEL_PREFIX)))


def _schemes(inputs: ReportInputs) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for r in inputs.rows("analyses"):
        key = (r["scheme"], r["interval_method"], r["reps"], r["seed"], r["quantile_lower"], r["quantile_upper"])
        seen.setdefault(key, {**r, "analyses": 0})["analyses"] += 1
    return list(seen.values())


def _section(key: str, blocks: list) -> Section:
    return Section(SECTION_TITLES[key], key, blocks)


def _arrow_table(table: pa.Table, collapsed: str | None = None) -> Table:
    cols = [c for c in table.column_names if c not in ("scheme", "reps", "seed", "analysis_order")]
    return Table(cols, [[r[c] for c in cols] for r in table.to_pylist()], collapsed)


def _rows_table(rows: list[dict], columns: list[str], collapsed: str | None = None, numbers: bool = False) -> Table:
    return Table(columns, [[r.get(c) for c in columns] for r in rows], collapsed, numbers)


def _absent(table: str) -> Text:
    return Text([f"This lake has no {table} table."])
