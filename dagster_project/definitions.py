"""The Dagster definitions of the lake: assets, checks, jobs, the landing and alert sensors, the schedule.

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
    load_asset_checks_from_package_module,
    load_assets_from_package_module,
)

import assets
from assets.catalog import catalog_asset
from assets.landing import landed_logs_job, landing_sensor
from assets.monitor import monitor_alert_sensor
from assets.resources import (
    DeclaredRules,
    ModelsResource,
    ProtocolResource,
    SourceResource,
    default_engine,
    default_models,
    default_notifier,
    default_protocol,
    default_source,
    lake_resource,
)
from assets.trend import recurring_evaluation_job, recurring_evaluation_schedule
from autheval.review.rules import RuleFile
from dagster_project.stages import COMMIT, JOBS

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


def _assets() -> list:
    """Every asset of the asset package, the catalog last: it depends on every other asset, so it is the
    last step of every run (it commits the run's snapshot). The partitioned landed_records is among its
    dependencies as lineage only: it lands and commits in runs of its own (landed_logs_job)."""
    loaded = load_assets_from_package_module(assets)
    return [*loaded, catalog_asset([key for a in loaded for key in a.keys])]


def study_assets() -> list:
    """Every asset and asset check of the asset package, unbound (dagster.materialize takes these)."""
    return [*_assets(), *load_asset_checks_from_package_module(assets)]


def stage_jobs() -> list:
    """One job per entry of the stage plan: its groups, then the catalog."""
    return [
        define_asset_job(
            name, selection=AssetSelection.groups(*groups) | AssetSelection.assets(COMMIT), description=description
        )
        for name, (groups, description) in JOBS.items()
    ]


def build_definitions(
    lake_root: str | None = None,
    source: SourceResource | None = None,
    models: ModelsResource | None = None,
    rules: RuleFile | str | None = None,
    protocol: str | None = None,
) -> Definitions:
    """The lake's definitions; `rules`: the declared local rules (a RuleFile or a YAML path; default:
    the study's), parsed at most once for every run of these definitions; `protocol`: the monitor's
    acceptance protocol (a YAML path; default $AUTHEVAL_PROTOCOL, else the packaged one). The schedule's
    cron and time zone come from $AUTHEVAL_MONITOR_CRON and $AUTHEVAL_MONITOR_TZ (default monthly, UTC)."""
    # One process per run: a run is one lake run holding the lake's writer lock from its first step to
    # its commit (assets.resources.LakeResource); a step per process would split it.
    return Definitions(
        executor=in_process_executor,
        assets=_assets(),
        asset_checks=load_asset_checks_from_package_module(assets),
        jobs=[*stage_jobs(), landed_logs_job, recurring_evaluation_job],  # the recurring jobs: landing; trend, monitor
        sensors=[landing_sensor, monitor_alert_sensor],
        schedules=[recurring_evaluation_schedule()],
        resources={
            "lake": lake_resource(lake_root),
            "source": source or default_source(),
            "models": models or default_models(),
            "engine": default_engine(),
            "rules": DeclaredRules(rules),
            "protocol": ProtocolResource(path=protocol) if protocol else default_protocol(),
            "notifier": default_notifier(),
        },
    )


defs = build_definitions()
