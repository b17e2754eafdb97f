"""catalog: the DuckDB catalog of views over every lake table, republished after the tables change.

One serialized step (the `duckdb_catalog` pool, limit 1): the catalog is rebuilt in a temporary file and
renamed, so readers never see a half-built catalog and never hold a writer's lock."""

from __future__ import annotations

from dagster import MaterializeResult, MetadataValue, asset

from assets.common import REPORTS
from dagster_project.resources import LakeResource
from warehouse.catalog import publish_catalog

CATALOG_DEPS = [
    "input_files", "images", "ingest_report", "image_hashes", "hash_failures", "duplicates",
    "duplicate_removals", "duplicate_report", "clusters", "gate_proxy", "gate_proxy_selection", "contexts",
    "vlm_scores", "readout", "probe_features", "probe", "cct_arms", "finetune", "proposals", "selections",
    "scores", "records", "estimates", "contrasts", "intervals", "subgroups", "fairness", "study_summary",
    "landed_records", "trend",
]  # fmt: skip


@asset(group_name=REPORTS, kinds={"duckdb"}, deps=CATALOG_DEPS, pool="duckdb_catalog", description=(
    "autheval.duckdb: read-only views over the lake's Parquet tables, for `autheval query`, "
    "notebooks and BI tools."))
def catalog(lake: LakeResource):
    store = lake.lake()
    path = publish_catalog(store)
    return MaterializeResult(metadata={"path": MetadataValue.path(str(path)), "views": ", ".join(store.tables())})
