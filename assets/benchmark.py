"""benchmark and transfer (DermoGPT spec section 7): each model mechanism's answers to a closed-ended
benchmark file by option likelihood (models/benchmark.py), its accuracy per task and axis with
whole-cluster bootstrap intervals and its fairness ratio per grouping (autheval/estimation/benchmark.py), and
`transfer`: the benchmark accuracy beside J, J_auth, p and Delta of every analysis (sql/proposals/transfer.sql).

The benchmark file is SourceResource.benchmark (`autheval demo --benchmark FILE`); a synthetic cohort
brings its own (benchmark.csv). A mechanism is answered by the language model it proposes with: the
readout and the CCT arms by the scorer's VLM (so they share one accuracy), a fine-tuned mechanism by the
scorer with its adapter (a model table whose Parquet metadata names an `adapter_dir`); a probe or a
file's mechanism has no model to ask, and its row says so. `transfer` runs in the reports stage,
after the estimates' blocking checks have passed."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from dagster import multi_asset

from assets.common import ESTIMATES, REPORTS, lake_query, table_asset, table_spec, write_table
from assets.model_proposals import MODEL_PROPOSAL_TABLES
from assets.proposals import ingest_exclusions
from assets.resources import LakeResource, ModelsResource, SourceResource
from autheval.estimation.benchmark import (
    ACCURACY_SCHEMA,
    FAIRNESS_SCHEMA,
    RESULTS_SCHEMA,
    accuracy_table,
    benchmark_items,
    fairness_table,
    not_scored,
    read_benchmark,
    results_table,
)
from autheval.estimation.estimators import DEFAULT_SEEDS
from autheval.estimation.provenance import Provenance, combined_sha256, stamp
from autheval.io import file_sha256

SCORER_TABLES = ("readout", "cct_arms")  # mechanisms proposing with the scorer's VLM itself
SEED = DEFAULT_SEEDS["reference"]


def _reason_without_model(table: str | None, producer: str | None) -> str:
    if table == "probe":
        return "not scored: a probe over a vision tower has no language model to answer benchmark items"
    if producer and producer.startswith("file:"):
        return "not scored: proposals given as a file; no model to answer benchmark items"
    return "not scored: no language model is known for this mechanism"


def mechanism_models(store, models: ModelsResource) -> dict[str, object]:
    """mechanism -> the ScorerConfig of the model it proposes with, for the lake's model mechanisms."""
    from models.scorer import ScorerConfig

    found: dict[str, object] = {}
    base = None
    for name in MODEL_PROPOSAL_TABLES:
        if not store.has_table(name):
            continue
        table = store.read(name)
        if not table.num_rows or name == "probe":
            continue
        if base is None:
            base = ScorerConfig(
                model_dir=str(models.scorer_model(store)), batch_size=models.batch_size, device=models.device_or_none()
            )
        adapter = (table.schema.metadata or {}).get(b"adapter_dir")
        if adapter:
            config = dataclasses.replace(base, adapter_dir=adapter.decode())
        elif name in SCORER_TABLES:
            config = base
        else:
            continue
        for mechanism in dict.fromkeys(table.column("mechanism").to_pylist()):
            found[mechanism] = config
    return found


def _provenance(source: SourceResource) -> Provenance:
    return Provenance(scheme="reference", seed=SEED, reps=source.reps)  # no declared rules apply to a benchmark


@multi_asset(
    specs=[
        table_spec(
            "benchmark_scores",
            ESTIMATES,
            ["proposals", "images", "clusters"],
            "mechanism, model, model_revision, item_id, cluster_id, axis, task, group, options, loglik (mean "
            "token log-likelihood per option), prob, choice, answer_index, correct: each model mechanism's "
            "answer to every item of the benchmark file by option likelihood (resumable cache under "
            "<lake>/cache/benchmark).",
            kinds={"parquet", "torch"},
        ),
        table_spec(
            "benchmark",
            ESTIMATES,
            ["benchmark_scores"],
            "mechanism, model, scope (all | axis | task), axis, task, n_items, n_clusters, n_correct, accuracy, "
            "ci_lower, ci_upper (whole-cluster bootstrap, reference scheme: items of one lesion are one "
            "cluster), available, reason (a mechanism with no language model is not scored).",
        ),
        table_spec(
            "benchmark_fairness",
            ESTIMATES,
            ["benchmark_scores"],
            "mechanism, model, task (null: every item), grouping, n_groups, groups, worst_group, best_group, "
            "min/max group accuracy and fairness_ratio = min / max (1 = equal), per grouping of the file's "
            "`group` column.",
        ),
    ]
)
def benchmark(context, lake: LakeResource, source: SourceResource, models: ModelsResource):
    store = lake.lake()
    # a lake of given records (no proposals stage) has no mechanisms to ask: empty tables, with the reason
    proposals = store.read("proposals") if store.has_table("proposals") else None
    mechanisms = list(dict.fromkeys(proposals.column("mechanism").to_pylist())) if proposals is not None else []
    producers = (
        dict(zip(proposals.column("mechanism").to_pylist(), proposals.column("producer").to_pylist()))
        if proposals is not None and "producer" in proposals.column_names
        else {}
    )
    path = source.benchmark_file()
    reason = None
    if proposals is None:
        reason = "not run: the lake has no proposals table (its records were given, not proposed here)"
    elif path is None:
        reason = "not run: no benchmark file (SourceResource.benchmark, autheval demo --benchmark FILE)"
    elif source.is_reference:
        reason = "not run: the reference study ships no images or models to answer benchmark items"
    if reason:
        table = not_scored(mechanisms, lambda m: reason)
        yield from _write(
            store, source, RESULTS_SCHEMA.empty_table(), table, FAIRNESS_SCHEMA.empty_table(), {}, status=reason
        )
        return

    from models.benchmark import score_benchmark

    excluded = ingest_exclusions(store)
    items = benchmark_items(read_benchmark(path), store.read("images"), store.read("clusters"), path, excluded)
    configs = mechanism_models(store, models)
    tables = {name for name in MODEL_PROPOSAL_TABLES if store.has_table(name)}
    table_of = {m: name for name in tables for m in store.read(name).column("mechanism").to_pylist()}
    scored, runs, results = {}, {}, []
    for mechanism in mechanisms:
        config = configs.get(mechanism)
        if config is None:
            continue
        key = (config.model_dir, config.adapter_dir)
        if key not in scored:
            scored[key], runs[key] = score_benchmark(items, config, store.root / "cache" / "benchmark")
            context.log.info(
                f"benchmark: {runs[key]['items_scored']} items scored by {runs[key]['model']} "
                f"({runs[key]['items_from_cache']} from the cache)"
            )
        results.append(results_table(items, scored[key], mechanism))
    results = pa.concat_tables(results) if results else RESULTS_SCHEMA.empty_table()
    accuracy = accuracy_table(results, source.reps, SEED) if results.num_rows else ACCURACY_SCHEMA.empty_table()
    unscored = [m for m in mechanisms if m not in configs]
    accuracy = pa.concat_tables(
        [accuracy, not_scored(unscored, lambda m: _reason_without_model(table_of.get(m), producers.get(m)))]
    )
    fairness = fairness_table(results) if results.num_rows else FAIRNESS_SCHEMA.empty_table()
    digest = file_sha256(path)
    revisions = dict(zip(results.column("mechanism").to_pylist(), results.column("model_revision").to_pylist()))
    hashes = {m: combined_sha256([digest, revisions.get(m) or ""]) for m in mechanisms}
    yield from _write(
        store,
        source,
        results,
        accuracy,
        fairness,
        hashes,
        file=path,
        items=items.num_rows,
        models=[run["model"] for run in runs.values()],
        items_scored=sum(run["items_scored"] for run in runs.values()),
        items_from_cache=sum(run["items_from_cache"] for run in runs.values()),
    )


def _write(store, source, results, accuracy, fairness, hashes, **meta):
    provenance = _provenance(source)
    yield write_table(
        store,
        "benchmark_scores",
        stamp(results, provenance, hashes, key="mechanism"),
        asset_key="benchmark_scores",
        **meta,
    )
    yield write_table(store, "benchmark", stamp(accuracy, provenance, hashes, key="mechanism"), asset_key="benchmark")
    yield write_table(
        store,
        "benchmark_fairness",
        stamp(fairness, provenance, hashes, key="mechanism"),
        asset_key="benchmark_fairness",
    )


@table_asset(
    REPORTS,
    ["estimates", "benchmark"],
    "study, analysis, mechanism, regime, benchmark_model, benchmark_items, benchmark_accuracy + CI, "
    "benchmark_available, benchmark_reason, J, J_auth (+ CIs), intervention_rate (p), Delta_authority + "
    "CI (image-weighted), gap_excludes_zero: does each mechanism's benchmark evidence describe the "
    "workflow? (it describes the selected action only where Delta is 0).",
)
def transfer(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    table = lake_query(store, "proposals/transfer", ["estimates", "benchmark"])
    keys = table.column("analysis").to_pylist()
    hashes = {
        a: combined_sha256([e, b])
        for a, e, b in zip(
            keys, table.column("estimates_sha256").to_pylist(), table.column("benchmark_sha256").to_pylist()
        )
    }
    rules = {
        a: (v, h)
        for a, v, h in zip(keys, table.column("rule_version").to_pylist(), table.column("rule_sha256").to_pylist())
    }
    table = stamp(table.drop_columns(["rule_version", "rule_sha256"]), _provenance(source), hashes, rules=rules)
    return write_table(store, "transfer", table)
