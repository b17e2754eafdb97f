"""What the report asks of the lake: the SQL files per part (REPORT_QUERIES), the tables they read,
the provenance each table should carry, and which file fills each part, given the lake's columns; kept
apart from the wording so the `report` asset can plan its reads without building anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autheval.estimation.subgroups import GROUP_COLUMNS
from autheval.monitoring.acknowledgements import ACKS_SCHEMA

# (part, SQL file, {table: columns it needs}): the asset runs, for each part, the first file whose tables
# and columns the lake holds; a part the lake cannot fill is reported as absent, never guessed.
# the monitor's columns the report reads (autheval.monitoring.monitor.MONITOR_SCHEMA has them, and more)
MONITOR_COLUMNS = (
    "site",
    "model_version",
    "mechanism",
    "metric",
    "unit",
    "period",
    "look",
    "n_clusters",
    "estimate",
    "cs_lower",
    "cs_upper",
    "ci_lower",
    "ci_upper",
    "lower",
    "upper",
    "status",
    "reason",
    "alpha_adjusted",
)
# the protocol's settings each monitor row carries (the acceptance criteria section states them)
PROTOCOL_COLUMNS = (
    "protocol_version",
    "protocol_sha256",
    "alpha",
    "multiplicity",
    "family_size",
    "min_clusters",
    "horizon_clusters",
)
# An estimate row as the report reads it, in estimates and in trend (a trend row is an estimate per period)
ESTIMATE_ROW = (
    "unit",
    "metric",
    "estimate",
    "ci_lower",
    "ci_upper",
    "n",
    "n_clusters",
    "available",
    "status",
    "reason",
)
# What names an analysis's data and rules: the report's analyses table shows these (sections_data.py)
ANALYSIS_STAMP = (
    "study",
    "analysis",
    "record_level",
    "mechanism",
    "source",
    "data_sha256",
    "rule_version",
    "rule_sha256",
)
# How an analysis's intervals were made: the report's analyses table, stamped or not, reads these
INTERVAL_STAMP = ("scheme", "interval_method", "reps", "seed", "quantile_lower", "quantile_upper")
# A fairness row as the report reads it; a table whose ratios carry intervals adds FAIRNESS_INTERVALS
FAIRNESS_ROW = (
    "analysis",
    "grouping",
    "n_groups",
    "worst_group_proposal",
    "min_accuracy_proposal",
    "max_accuracy_proposal",
    "fairness_proposal",
    "worst_group_selected",
    "min_accuracy_selected",
    "max_accuracy_selected",
    "fairness_selected",
)
LU = ("lower", "upper")
# each ratio's interval, the pair it compares, why a ratio is not estimable, and how the interval was made
FAIRNESS_INTERVALS = (
    *(f"fairness_{r}_ci_{end}" for r in ("proposal", "selected") for end in LU),
    "best_group_proposal",
    "best_group_selected",
    "reason",
    "unit",
    "interval_method",
    "scheme",
    "seed",
    "reps",
)
REPORT_QUERIES: tuple[tuple[str, str, dict[str, tuple[str, ...]]], ...] = (
    (
        "estimates",
        "reports/report_estimates",
        {"estimates": ("study", "analysis", *ESTIMATE_ROW, "record_level", "analysis_order")},
    ),
    (
        "analyses",
        "reports/report_analyses_stamped",
        {"estimates": (*ANALYSIS_STAMP, *INTERVAL_STAMP, "engine", "software_version", "analysis_order")},
    ),
    (
        "analyses",
        "reports/report_analyses",
        {
            "estimates": (
                "study",
                "analysis",
                "record_level",
                "model",
                "source",
                "data_sha256",
                *INTERVAL_STAMP,
                "analysis_order",
            )
        },
    ),
    ("rules", "reports/report_rules", {"contexts": ("rule_version", "rule_sha256")}),
    ("rules", "reports/report_rules_estimates", {"estimates": ("analysis", "rule_version", "rule_sha256")}),
    (
        "mechanisms",
        "reports/report_mechanisms_produced",
        {"proposals": ("mechanism", "source", "producer", "producer_sha256")},
    ),
    (
        "mechanisms",
        "reports/report_mechanisms_produced_unsourced",
        {"proposals": ("mechanism", "producer", "producer_sha256")},
    ),
    ("mechanisms", "reports/report_mechanisms", {"proposals": ("mechanism", "source")}),
    ("mechanisms", "reports/report_mechanisms_unsourced", {"proposals": ("mechanism",)}),
    (
        "vlm_models",
        "reports/report_vlm_models",
        {"vlm_scores": ("model", "revision", "backend", "method", "device", "dtype", "image_id", "prompt_id")},
    ),
    ("probe_models", "reports/report_probe_models", {"probe_features": ("model", "image_id")}),
    (
        "model_runs",
        "reports/report_model_runs",
        {"model_runs": ("trainer", "mechanism", "model", "model_revision", "data_sha256", "seed")},
    ),
    ("change_types", "reports/report_change_types", {"selections": ("analysis", "change_type")}),
    ("overrides", "reports/report_overrides", {"selections": ("analysis", "override", "a_head", "a_sel")}),
    (
        "error_cases",
        "reports/report_error_cases",
        {"selections": ("analysis", "image_id", "a_head", "a_sel"), "images": ("image_id", "ideal_action_level")},
    ),
    ("ingest", "reports/report_ingest", {"ingest_report": ("reason", "action")}),
    (
        "duplicates",
        "reports/report_duplicates",
        {"duplicate_report": ("hash_kind", "threshold", "use", "component_id", "component_crosses_split")},
    ),
    ("removals", "reports/report_duplicate_removals", {"duplicate_removals": ("hash_kind", "threshold")}),
    ("images", "reports/report_images", {"images": ("image_id", "source"), "clusters": ("image_id", "split")}),
    (
        "evaluated",
        "reports/report_evaluated",
        {"records": ("analysis", "case_id", "cluster_id"), "clusters": ("image_id", "split")},
    ),
    (
        "input_files",
        "reports/report_input_files_reference",
        {"input_files": ("name", "source", "source_sha256", "rows")},
    ),
    ("input_files", "reports/report_input_files_raw", {"input_files": ("role", "path", "sha256", "expected_sha256")}),
    (
        "subgroups",
        "reports/report_subgroups",
        {
            "subgroups": (
                *(c for c in GROUP_COLUMNS if not c.startswith("balanced_")),
                "metric",
                "unit",
                "estimate",
                "ci_lower",
                "ci_upper",
                "p_adjusted",
                "q_value",
                "family_size",
                "excludes_zero",
                "excludes_zero_adjusted",
                "status",
            )
        },
    ),
    (
        "fairness",
        "reports/report_fairness_intervals",
        {"fairness": (*FAIRNESS_ROW, *FAIRNESS_INTERVALS)},
    ),
    ("fairness", "reports/report_fairness", {"fairness": FAIRNESS_ROW}),
    (
        "benchmark",
        "reports/report_benchmark",
        {
            "benchmark": (
                "mechanism",
                "model",
                "scope",
                "axis",
                "task",
                "n_items",
                "n_clusters",
                "accuracy",
                "ci_lower",
                "ci_upper",
                "available",
                "reason",
            )
        },
    ),
    (
        "benchmark_fairness",
        "reports/report_benchmark_fairness",
        {
            "benchmark_fairness": (
                "mechanism",
                "model",
                "task",
                "grouping",
                "n_groups",
                "worst_group",
                "best_group",
                "min_accuracy",
                "max_accuracy",
                "fairness_ratio",
            )
        },
    ),
    (
        "transfer",
        "reports/report_transfer",
        {
            "transfer": (
                "analysis",
                "analysis_order",
                "mechanism",
                "regime",
                "benchmark_model",
                "benchmark_items",
                "benchmark_accuracy",
                "benchmark_ci_lower",
                "benchmark_ci_upper",
                "benchmark_available",
                "benchmark_reason",
                "J",
                "J_auth",
                "intervention_rate",
                "Delta_authority",
                "Delta_authority_ci_lower",
                "Delta_authority_ci_upper",
                "gap_excludes_zero",
            )
        },
    ),
    (
        "trend",
        "reports/report_trend",
        {"trend": ("site", "model_version", "period", "pool", *ESTIMATE_ROW)},
    ),
    ("trend", "reports/report_trend_pooled", {"trend": ("period", "pool", *ESTIMATE_ROW)}),  # an older lake
    ("monitor_latest", "reports/report_monitor_latest", {"monitor": MONITOR_COLUMNS}),
    ("monitor_series", "reports/report_monitor_series", {"monitor": MONITOR_COLUMNS}),
    # every alert (a run of alerting looks, in force or ended): the one file `autheval monitor ack` reads too
    ("monitor_alerts", "recurring/monitor_alert_episodes", {"monitor": (*MONITOR_COLUMNS, *PROTOCOL_COLUMNS[:2])}),
    ("monitor_criteria", "reports/report_monitor_criteria", {"monitor": (*MONITOR_COLUMNS, *PROTOCOL_COLUMNS)}),
    (
        "monitor_acknowledgements",
        "reports/report_monitor_acknowledgements",
        {"monitor_acknowledgements": tuple(ACKS_SCHEMA.names)},  # the record's own columns
    ),
    (
        "monitor_case_mix",
        "reports/report_monitor_case_mix",
        {
            "monitor_case_mix": (
                "site",
                "period",
                "look",
                "dimension",
                "category",
                "baseline_share",
                "share",
                "p_value",
                "shifted",
                "reason",
            )
        },
    ),
)
REPORT_TABLES = tuple(sorted({t for _, _, needs in REPORT_QUERIES for t in needs} | {"study_summary", "contrasts"}))

# Provenance each result row should name (architecture: "every number names what made it"); the report
# lists the ones a table of this lake does not carry.
ROW_PROVENANCE = ("data_sha256", "rule_version", "rule_sha256", "scheme", "seed", "reps", "engine", "software_version")
PROVENANCE_FIELDS = {
    **dict.fromkeys(
        ("estimates", "contrasts", "study_summary", "subgroups", "fairness", "trend", "benchmark", "transfer"),
        ROW_PROVENANCE,
    ),
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
