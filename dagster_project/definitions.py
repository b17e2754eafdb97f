"""The Dagster definitions of the lake: assets, checks, jobs, the landing sensor and the schedule.

`dagster dev -m dagster_project` (or `autheval ui`) serves them; `autheval demo` materializes them
in-process. The lake root comes from AUTHEVAL_LAKE (default warehouse/lake)."""

from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, load_asset_checks_from_modules, load_assets_from_modules

import assets.catalog
import assets.clusters
import assets.duplicates
import assets.estimates
import assets.image_hashes
import assets.images
import assets.landing
import assets.proposals
import assets.records
import assets.reports
import assets.scores
import assets.selections
import assets.trend
from dagster_project.resources import LakeResource, SourceResource, default_lake_root, default_source

STUDY_MODULES = [assets.images, assets.image_hashes, assets.duplicates, assets.clusters, assets.proposals, assets.selections, assets.scores,
                 assets.records, assets.estimates, assets.reports, assets.catalog, assets.landing,
                 assets.trend]  # fmt: skip

raw_path_job = define_asset_job(
    "raw_path", selection=AssetSelection.groups("ingest", "duplicates") | AssetSelection.assets("catalog"),
    description="A raw ISIC-layout cohort (source synthetic or isic2019): images, hashes, duplicates, clusters, splits.",
)

reference_study_job = define_asset_job(
    "reference_study", selection=AssetSelection.groups("ingest", "duplicates", "proposals", "review", "scoring", "estimates", "reports"),
    description="The reference AuthEval study from the embedded traces: every table, check and the report.",
)


def study_assets() -> list:
    """Every asset and asset check of the lake, unbound (dagster.materialize takes these)."""
    return [*load_assets_from_modules(STUDY_MODULES), *load_asset_checks_from_modules(STUDY_MODULES)]


def build_definitions(lake_root: str | None = None, source: SourceResource | None = None) -> Definitions:
    return Definitions(
        assets=load_assets_from_modules(STUDY_MODULES),
        asset_checks=load_asset_checks_from_modules(STUDY_MODULES),
        jobs=[reference_study_job, raw_path_job, assets.landing.landed_logs_job, assets.trend.recurring_evaluation_job],
        sensors=[assets.landing.landing_sensor],
        schedules=[assets.trend.recurring_evaluation_schedule],
        resources={"lake": LakeResource(root=lake_root or default_lake_root()), "source": source or default_source()},
    )


defs = build_definitions()
