"""Which SQL file and asset make each lake table: the declared map, TABLE_PRODUCERS, and the documents
generated from it, docs/tables.md and one sql/<stage>/README.md per SQL folder
(`python -m dagster_project.table_index --write`; `--check` says whether they are stale).

TABLE_PRODUCERS: lake table (asset key) -> {source: producer}. The source is the data path that makes
the table (SOURCES says what each one is); the producer is the SQL file whose result is the table's rows
("stage/name", as warehouse.sql loads it), or, where no SQL file makes them, the Python function that
does ("package.module.function"); an asset that writes no table says so ("writes no table: ...").
TABLE_NOTES adds what one producer per source cannot say (a second file, where an empty table comes from).

tests/test_table_index.py holds the map to the definitions and the code: every asset key of the
definitions is here and nothing else, every SQL producer exists and is named by the asset's own module
or a project module it imports, every Python producer imports, and the generated documents equal what
this module renders. Dagster is imported only inside the functions that read the definitions."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from warehouse.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
SQL_ROOT = ROOT / "sql"
TABLES_DOC = "docs/tables.md"
COMMAND = "python -m dagster_project.table_index --write"
NO_TABLE = "writes no table: "
SQL_NAME = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$")  # warehouse.sql's stage/name
PYTHON_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")

# The sources: the data paths a table can come from.
REFERENCE = "reference study"
COHORT = "raw cohort"
EVERY = "every source"
PROPOSALS_FILE = "proposals file"
GATE_FILE = "gate scores file"
MODELS = "model mechanisms"
FINETUNE_ON = "fine-tune on"
GRPO_ON = "GRPO on"
BENCHMARK_FILE = "benchmark file"
NOT_RUN = "not run"
LANDED = "landed logs"
HUB = "site exports"

SOURCES = {
    REFERENCE: "the embedded AuthEval study's traces and published hashes (source `reference`, the default)",
    COHORT: "a cohort folder in the ISIC 2019 layout (source `synthetic` or `isic2019`)",
    EVERY: "the same producer whatever the source",
    PROPOSALS_FILE: "a raw cohort's proposals file (SourceResource.proposals; a synthetic cohort's own proposals.csv)",
    GATE_FILE: "per-image gate scores a raw source gives (SourceResource.gate_scores), used instead of the fitted "
    "proxy",
    MODELS: "a raw cohort with the model mechanisms on (ModelsResource.enabled, $AUTHEVAL_MODELS=1)",
    FINETUNE_ON: "model mechanisms with the LoRA fine-tune configured (ModelsResource.finetune)",
    GRPO_ON: "model mechanisms with GRPO configured (ModelsResource.grpo, with the fine-tune)",
    BENCHMARK_FILE: "a raw cohort with a benchmark file (SourceResource.benchmark; a synthetic cohort's own "
    "benchmark.csv)",
    NOT_RUN: "the step does not run for this source or configuration (the reference study, model mechanisms off, "
    "the fine-tune or GRPO not configured, no benchmark file): an empty table, whose metadata says why",
    LANDED: "role-separated logs dropped into the landing folder, one partition per file (the recurring job)",
    HUB: "signed site exports landed in a hub lake (landing/exports/, `autheval site land`; docs/sites.md)",
}

# lake table (asset key) -> {source: producer}, in run order
TABLE_PRODUCERS: dict[str, dict[str, str]] = {
    # ingest
    "input_files": {REFERENCE: "autheval.reference_data.manifest", COHORT: "autheval.raw.ingest.ingest_isic2019"},
    "image_hashes": {REFERENCE: "ingest/reference_image_hashes", COHORT: "autheval.raw.phash.hash_images"},
    "hash_failures": {REFERENCE: "assets.images._reference_tables", COHORT: "autheval.raw.phash.hash_images"},
    "images": {REFERENCE: "ingest/images_reference", COHORT: "ingest/images_raw"},
    "ingest_report": {REFERENCE: "assets.images._reference_tables", COHORT: "autheval.raw.pipeline.screen_images"},
    "declared_rules": {EVERY: NO_TABLE + "the rules' metadata (version, SHA-256, where they came from)"},
    # duplicates
    "duplicates": {EVERY: "duplicates/raw_components"},
    "duplicate_removals": {EVERY: "autheval.raw.duplicates.removals"},
    "clusters": {EVERY: "duplicates/raw_cluster_ids"},
    "duplicate_report": {EVERY: "duplicates/raw_duplicate_splits"},
    # context (raw cohorts only: the reference study ships no image metadata or gate scores)
    "gate_proxy": {COHORT: "models.gate_proxy.fit_gate_proxy", GATE_FILE: "context/gate_scores_given"},
    "gate_proxy_selection": {COHORT: "models.gate_proxy.fit_gate_proxy", GATE_FILE: "assets.gate_proxy.gate_proxy"},
    "contexts": {COHORT: "context/contexts"},
    # proposals
    "vlm_scores": {MODELS: "models.scorer.score_prompt_variants", NOT_RUN: "assets.common.open_model_asset"},
    "readout": {MODELS: "models.readout.readout_proposals_table", NOT_RUN: "assets.common.open_model_asset"},
    "probe_features": {MODELS: "models.probe.tower_features", NOT_RUN: "assets.common.open_model_asset"},
    "probe": {MODELS: "models.probe.ProbeFit.proposals", NOT_RUN: "assets.common.open_model_asset"},
    "cct_arms": {MODELS: "autheval.proposals.cct.cct_proposals", NOT_RUN: "assets.common.open_model_asset"},
    "finetune": {FINETUNE_ON: "models.scorer.proposals_from_scores", NOT_RUN: "assets.common.open_model_asset"},
    "grpo": {GRPO_ON: "models.scorer.proposals_from_scores", NOT_RUN: "assets.common.open_model_asset"},
    "grpo_steps": {GRPO_ON: "models.grpo.steps_table", NOT_RUN: "assets.common.open_model_asset"},
    "model_runs": {EVERY: "models.training_runs.combine"},
    "proposals": {
        REFERENCE: "proposals/proposals",
        PROPOSALS_FILE: "proposals/proposals_file_slates",
        MODELS: "autheval.proposals.proposals_file.combine_proposals",
    },
    # review
    "selections": {REFERENCE: "review/selections_reference", COHORT: "review/selections_cohort"},
    # scoring
    "scores": {REFERENCE: "scoring/scores_reference", COHORT: "scoring/scores_cohort"},
    "records": {REFERENCE: "review/records", COHORT: "review/records_of_review"},
    # estimates
    "estimates": {EVERY: "autheval.estimation.estimators.estimate"},
    "contrasts": {EVERY: "estimates/paired_contrast"},
    "intervals": {EVERY: "autheval.estimation.analytic.interval_table"},
    "subgroups": {EVERY: "estimates/subgroups"},
    "fairness": {EVERY: "estimates/fairness"},
    "benchmark_scores": {BENCHMARK_FILE: "proposals/benchmark_results", NOT_RUN: "assets.benchmark.benchmark"},
    "benchmark": {BENCHMARK_FILE: "proposals/benchmark_intervals", NOT_RUN: "autheval.estimation.benchmark.not_scored"},
    "benchmark_fairness": {BENCHMARK_FILE: "proposals/benchmark_fairness", NOT_RUN: "assets.benchmark.benchmark"},
    # reports
    "study_summary": {EVERY: "estimates/study_summary"},
    "transfer": {EVERY: "proposals/transfer"},
    "report": {EVERY: NO_TABLE + "reports/report.md and reports/report.html, from the queries of sql/reports/"},
    "catalog": {EVERY: NO_TABLE + "commits the run's tables as one snapshot and publishes its DuckDB catalog of views"},
    # recurring
    "landed_records": {LANDED: "autheval.monitoring.landing.read_landed"},
    "trend": {LANDED: "autheval.monitoring.landing.trend_table"},
    "monitor": {LANDED: "autheval.monitoring.monitor.monitor_table"},
    "monitor_case_mix": {LANDED: "recurring/monitor_case_mix"},
    "site_exports": {HUB: "autheval.sites.lake.site_exports_table"},
    "heterogeneity": {HUB: "autheval.sites.lake.hub_tables"},
}

# What one producer per source leaves unsaid. A SQL file or Python path named here in backticks is checked.
TABLE_NOTES = {
    "input_files": "reference study: one row per embedded file of the package's manifest.",
    "hash_failures": "empty for the reference study (its images are not shipped, so none is read).",
    "ingest_report": "empty for the reference study; a raw cohort's rows are those of "
    "`autheval.raw.ingest.ingest_isic2019` plus the unreadable images and format mismatches found when hashing.",
    "images": "raw cohort: `ingest/images_raw` over the metadata `autheval.raw.ingest.ingest_isic2019` read; the "
    "unreadable images are then left out and the skin tone estimated (`autheval.raw.skin_tone.with_skin_tone`).",
    "duplicates": "one `duplicates/raw_components` result per declared rule (the exact groups first), joined by "
    "`autheval.raw.duplicates.find_duplicates`.",
    "clusters": "the rows of `duplicates/raw_cluster_ids` (`autheval.raw.clusters.assign_clusters`), the split "
    "added by `autheval.raw.pipeline.cluster_images`: the frozen split for the reference study, computed or frozen "
    "for a raw cohort.",
    "gate_proxy_selection": "gate scores file: one row naming the file; nothing is selected.",
    "contexts": "image profiles first (`ingest/image_profiles`), with each evaluated image's gate score "
    "(`context/evaluated_gate_scores`): `autheval.review.local_review.build_contexts`.",
    "probe": "trained by `models.probe.train_probe_from_tables` on the features of `probe_features`.",
    "finetune": "trained by `models.finetune.finetune_proposer`, then scored on the evaluated split with its adapter "
    "(`assets.model_proposals.adapter_proposals`).",
    "grpo": "trained by `models.grpo.grpo_train` from the fine-tune's adapter, then scored on the evaluated split as "
    "the fine-tune is (`assets.model_proposals.adapter_proposals`).",
    "model_runs": "empty when nothing was trained (the reference study, model mechanisms off).",
    "proposals": "a raw cohort takes its proposals file's mechanisms first, then the model mechanisms' tables "
    "(readout, probe, cct_arms, finetune, grpo); every row is stamped with its producer "
    "(`assets.proposals.with_producers`).",
    "selections": "raw cohort: the proposals of the evaluated images (`proposals/evaluated_proposals`) within the "
    "review bands (`review/review_bands`): `autheval.review.local_review.build_selections`.",
    "scores": "raw cohort: the rows of `scoring/scores_cohort` (`autheval.review.local_review.build_scores`) pass "
    "through `scoring/scores_hierarchical`, which adds s_hier.",
    "estimates": "one row per analysis, unit and metric, its interval from `estimates/intervals` (an unsupported "
    "metric reported as not recoverable), in the layout of `autheval.estimation.study.estimates_table`.",
    "contrasts": "the paired contrasts of `autheval.estimation.estimators.estimate`, in the layout of "
    "`autheval.estimation.study.contrasts_table`; empty when a study declares no contrast.",
    "intervals": "the bootstrap rows of the estimates beside the delta-method rows of `estimates/delta_method` "
    "(`autheval.estimation.analytic.delta_method_rows`).",
    "subgroups": "made by `autheval.estimation.subgroups.subgroup_tables`, with the multiplicity columns of "
    "`autheval.estimation.multiplicity.adjust_subgroups`.",
    "benchmark": "benchmark file: the mechanisms no language model answers (a probe, a file's mechanism, models off) "
    "get `autheval.estimation.benchmark.not_scored` rows.",
    "trend": "empty until a log has landed, as are monitor and monitor_case_mix.",
    "site_exports": "the step also writes the hub lake's estimates, intervals, contrasts, monitor, monitor_case_mix "
    "and monitor_decisions as the pool of every landed export (`autheval.sites.lake.hub_tables`): their asset keys "
    "are the records path's and the landed logs', which a hub lake does not run.",
}

# What each SQL folder holds besides the producers of lake tables (one line each).
FOLDER_NOTES = {
    "context": "the gate proxy's inputs, the validation of a given gate-score file, the evaluated gate scores, the "
    "reference study's implied contexts (the check that the declared rules reproduce its traces) and the "
    "context asset checks.",
    "duplicates": "the steps of the duplicate search and of the clusters (exact groups, near pairs by multi-index "
    "or brute force, base nodes, split signatures and crossings), the cross-split report and the asset check that no "
    "cluster crosses a split.",
    "estimates": "the estimators' steps (replicate sums and metrics, intervals, the identity check, the delta method, "
    "multiplicity, the paired-cluster check, their portable twins for other engines), the subgroups' steps, the "
    "estimates' asset checks and the demo's fairness summary.",
    "ingest": "reading and checking a raw cohort (its CSVs, row-level problems, a frozen split), the image profiles "
    "of the review, the reference traces, the unique-image check and the demo's raw-path summary.",
    "proposals": "proposals-file validation and coverage, the evaluated rows the mechanisms and the review read, the "
    "model mechanisms' inputs (scorer, readout, probe, fine-tune and GRPO examples), the reference study's control "
    "proposals, the benchmark's steps, the frozen-heads check and the demo's summaries.",
    "records": "record validation, normalisation and dataset scans, per-cluster sums and statistics and the lake "
    "records' views, which the estimators read; the scale benchmarks' synthetic log.",
    "recurring": "the landing and trend steps (periods, pools), the monitor's looks, confidence sequences, "
    "multiplicity and status, the case-mix counts and the deployment simulation.",
    "reports": "the report's queries over the lake's tables (autheval.reporting.report.report_queries).",
    "review": "the review bands, the review's own records and change counts, the reference traces as selections, "
    "the reference controls' checks and the selections' band check.",
    "scoring": "the scored selections (the view the scores read), `scoring/scores_hierarchical` (s_hier added to a "
    "raw cohort's scores) and the score checks.",
    "sites": "a site export's per-cluster delta-method terms and cluster counts (autheval/sites/export.py).",
    "warehouse": "the storage layer's statements: catalog views and snapshots, COPY to Parquet, dropping a table or "
    "view, DuckDB's memory cap.",
}


# ---------------------------------------------------------------------------------- reading the map


def producer_kind(producer: str) -> str:
    """'none' (writes no table), 'sql' (stage/name) or 'python' (a dotted path); ValueError otherwise."""
    if producer.startswith(NO_TABLE):
        return "none"
    if SQL_NAME.match(producer):
        return "sql"
    if PYTHON_NAME.match(producer):
        return "python"
    raise ValueError(f"producer {producer!r} is neither stage/name, a dotted Python path nor {NO_TABLE!r}...")


def names_in(text: str) -> list[str]:
    """The SQL file names and dotted Python paths a text writes in backticks."""
    return [name for name in re.findall(r"`([^`]+)`", text) if SQL_NAME.match(name) or PYTHON_NAME.match(name)]


def sql_folders(root: Path = SQL_ROOT) -> list[str]:
    """The stage folders of sql/ (those holding .sql files), sorted."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.sql")))


def folder_producers(stage: str, mapping: dict[str, dict[str, str]] = TABLE_PRODUCERS) -> list[tuple[str, str, str]]:
    """(table, source, producer) of every SQL producer in sql/<stage>/, in the map's order."""
    return [
        (table, source, producer)
        for table, producers in mapping.items()
        for source, producer in producers.items()
        if producer_kind(producer) == "sql" and producer.split("/")[0] == stage
    ]


def asset_index() -> dict[str, tuple[str, str, str]]:
    """table (asset key) -> (group, module, function) as the definitions hold them."""
    from dagster_project.definitions import defs

    found = {}
    for node in defs.resolve_asset_graph().asset_nodes:
        fn = node.assets_def.op.compute_fn.decorated_fn
        found[node.key.to_user_string()] = (node.group_name, fn.__module__, fn.__name__)
    return found


def stage_order() -> list[str]:
    """The asset groups in run order, the recurring group last."""
    from assets.common import RECURRING
    from dagster_project.stages import STAGES

    return [*STAGES, RECURRING]


# ---------------------------------------------------------------------------------- the documents


def _code(text: str) -> str:
    return f"`{text}`"


def _shown(producer: str) -> str:
    return producer if producer_kind(producer) == "none" else _code(producer)


def _generated(other: str) -> str:
    return f"Generated by `{COMMAND}` from `dagster_project/table_index.py`{other}; do not edit by hand."


def _ordered(mapping, assets) -> list[str]:
    """The tables by stage in run order, then as the map lists them."""
    stages = stage_order()
    position = {table: i for i, table in enumerate(mapping)}
    rank = {stage: i for i, stage in enumerate(stages)}
    return sorted(mapping, key=lambda t: (rank.get(assets[t][0], len(stages)), position[t]))


def render_markdown(
    mapping: dict[str, dict[str, str]] = TABLE_PRODUCERS, assets: dict[str, tuple[str, str, str]] | None = None
) -> str:
    """docs/tables.md: every lake table with its stage, asset and producer per source, the notes, then per
    SQL folder the tables its files make."""
    assets = asset_index() if assets is None else assets
    lines = [
        "# Lake tables: which SQL file and asset make each",
        "",
        _generated(" (TABLE_PRODUCERS); `tests/test_table_index.py` checks it against the definitions"),
        "",
        "A producer is the SQL file whose result is the table's rows (`stage/name`: `sql/<stage>/<name>.sql`, "
        "run through `warehouse.sql`) or, where no SQL file makes them, the Python function that does. "
        "The sources:",
        "",
        *[f"* **{source}**: {what}" for source, what in SOURCES.items()],
        "",
        "| table | stage | asset | producer per source |",
        "|---|---|---|---|",
    ]
    for table in _ordered(mapping, assets):
        group, module, function = assets[table]
        producers = "<br>".join(f"{source}: {_shown(p)}" for source, p in mapping[table].items())
        asset = _code(f"{module.replace('.', '/')}.py: {function}")
        lines.append(f"| {_code(table)} | {group} | {asset} | {producers} |")
    lines += ["", "## Notes", ""]
    lines += [f"* {_code(table)}: {TABLE_NOTES[table]}" for table in _ordered(mapping, assets) if table in TABLE_NOTES]
    lines += ["", "## By SQL folder", ""]
    for stage in sql_folders():
        lines += [f"### sql/{stage}/", ""]
        made = folder_producers(stage, mapping)
        lines += [f"* {_code(t)} ({source}) -> {_code(p)}" for t, source, p in made] or ["No lake table's producer."]
        lines += ["", f"Also here: {FOLDER_NOTES[stage]}", ""]
    return "\n".join(lines)


def render_folder_readme(stage: str, mapping: dict[str, dict[str, str]] = TABLE_PRODUCERS) -> str:
    """sql/<stage>/README.md: the lake tables a file of the folder makes, per source, and what else it holds."""
    lines = [
        f"# sql/{stage}/",
        "",
        _generated(f"; every table: [docs/tables.md](../../{TABLES_DOC})"),
        "",
    ]
    made = folder_producers(stage, mapping)
    if made:
        lines += [
            "The lake tables made by a file of this folder:",
            "",
            "| table | source | producer |",
            "|---|---|---|",
        ]
        lines += [f"| {_code(t)} | {source} | {_code(p)} |" for t, source, p in made]
    else:
        lines.append("No lake table is made by a file of this folder.")
    lines += ["", f"Also here: {FOLDER_NOTES[stage]}", ""]
    return "\n".join(lines)


def documents(assets: dict[str, tuple[str, str, str]] | None = None) -> dict[str, str]:
    """Path relative to the repository -> its generated text."""
    found = {TABLES_DOC: render_markdown(assets=assets)}
    found.update({f"sql/{stage}/README.md": render_folder_readme(stage) for stage in sql_folders()})
    return found


def stale(root: Path = ROOT) -> list[str]:
    """The generated documents that differ from what is rendered (or are missing)."""
    return [
        path
        for path, text in documents().items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]


def write(root: Path = ROOT) -> list[str]:
    """Write every generated document, each atomically (a link in its place is replaced, never written
    through); returns their paths."""
    written = []
    for path, text in documents().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(root / path, text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        for path in write():
            print(path)
        return 0
    if args == ["--check"]:
        behind = stale()
        for path in behind:
            print(f"{path} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if behind else 0
    if not args:
        print(render_markdown(), end="")
        return 0
    print("usage: python -m dagster_project.table_index [--write | --check]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
