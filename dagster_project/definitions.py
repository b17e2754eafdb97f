"""The Dagster definitions of the lake: assets, checks, jobs, the landing sensor and the schedule.

`dagster dev -m dagster_project` (or `autheval ui`) serves them; `autheval demo` materializes them
in-process. The lake root comes from AUTHEVAL_LAKE (default warehouse/lake), through the resources'
EnvVar fields.

The instance settings live here too (INSTANCE_SETTINGS: the `duckdb_catalog` pool, limit 1, so one
catalog publish runs at a time; telemetry off): the demo's instance is built from them
(`project_instance()`), ./dagster.yaml (what `dagster dev` run from the repository uses when DAGSTER_HOME
is unset) is `instance_yaml()`, and so is the dagster.yaml `autheval ui` writes into its DAGSTER_HOME."""

from __future__ import annotations

from dagster import (
    AssetSelection,
    DagsterInstance,
    Definitions,
    define_asset_job,
    in_process_executor,
    load_asset_checks_from_modules,
    load_assets_from_modules,
)

import assets.catalog
import assets.clusters
import assets.contexts
import assets.duplicates
import assets.estimates
import assets.gate_proxy
import assets.images
import assets.landing
import assets.model_proposals
import assets.proposals
import assets.records
import assets.reports
import assets.scores
import assets.selections
import assets.subgroups
import assets.trend
from dagster_project.resources import ModelsResource, SourceResource, default_engine, default_models, default_source, lake_resource

STUDY_MODULES = [assets.images, assets.duplicates, assets.clusters, assets.gate_proxy, assets.contexts,
                 assets.model_proposals, assets.proposals, assets.selections, assets.scores, assets.records, assets.estimates,
                 assets.subgroups, assets.reports, assets.catalog, assets.landing, assets.trend]  # fmt: skip

# Concurrency pools and their limits: the catalog is published by one step at a time, in every run.
CATALOG_POOL = "duckdb_catalog"
POOL_LIMITS = {CATALOG_POOL: 1}
INSTANCE_SETTINGS = {
    "telemetry": {"enabled": False},
    # every pool of the project is limited to 1 (the only pool is the catalog's); POOL_LIMITS also
    # sets it by name on the instances this project builds
    "concurrency": {"pools": {"default_limit": min(POOL_LIMITS.values())}},
}


def instance_yaml() -> str:
    """INSTANCE_SETTINGS as a dagster.yaml."""
    import yaml

    return yaml.safe_dump(INSTANCE_SETTINGS, sort_keys=True)


def configure_instance(instance: DagsterInstance) -> DagsterInstance:
    """Set POOL_LIMITS on an instance (its pools then show these limits in the UI)."""
    for pool, limit in POOL_LIMITS.items():
        instance.event_log_storage.set_concurrency_slots(pool, limit)
    return instance


def project_instance() -> DagsterInstance:
    """An in-memory instance with the project's settings and pool limits (the demo's)."""
    return configure_instance(DagsterInstance.ephemeral(settings=INSTANCE_SETTINGS))


raw_path_job = define_asset_job(
    "raw_path", selection=AssetSelection.groups("ingest", "duplicates", "context") | AssetSelection.assets("catalog"),
    description="A raw ISIC-layout cohort (source synthetic or isic2019): images, hashes, duplicates, clusters, "
                "splits, gate proxy and review contexts.",
)

cohort_study_job = define_asset_job(
    "cohort_study", selection=AssetSelection.groups(
        "ingest", "duplicates", "context", "proposals", "review", "scoring", "estimates", "reports"),
    description="A raw cohort end to end: the raw path, the declared local review of every proposal mechanism "
                "under each regime, scores, records, estimates with paired contrasts, subgroups, the report.",
)

reference_study_job = define_asset_job(
    "reference_study", selection=AssetSelection.groups("ingest", "duplicates", "proposals", "review", "scoring", "estimates", "reports"),
    description="The reference AuthEval study from the embedded traces: every table, check and the report.",
)


def study_assets() -> list:
    """Every asset and asset check of the lake, unbound (dagster.materialize takes these)."""
    return [*load_assets_from_modules(STUDY_MODULES), *load_asset_checks_from_modules(STUDY_MODULES)]


def build_definitions(lake_root: str | None = None, source: SourceResource | None = None,
                      models: ModelsResource | None = None) -> Definitions:
    # One process per run: a run is one lake run holding the lake's writer lock from its first step to
    # its commit (dagster_project.resources.LakeResource); a step per process would split it.
    return Definitions(
        executor=in_process_executor,
        assets=load_assets_from_modules(STUDY_MODULES),
        asset_checks=load_asset_checks_from_modules(STUDY_MODULES),
        jobs=[reference_study_job, raw_path_job, cohort_study_job, assets.landing.landed_logs_job, assets.trend.recurring_evaluation_job],
        sensors=[assets.landing.landing_sensor],
        schedules=[assets.trend.recurring_evaluation_schedule],
        resources={"lake": lake_resource(lake_root), "source": source or default_source(),
                   "models": models or default_models(), "engine": default_engine()},
    )


defs = build_definitions()
