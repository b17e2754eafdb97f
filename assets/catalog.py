"""catalog: the commit of the run's tables as one lake snapshot, and its DuckDB catalog of views.

One serialized step (the `duckdb_catalog` pool, limit 1): the run's staged tables commit together
(warehouse/snapshots.py), the snapshot's catalog is built in a temporary file and renamed into place,
so readers see the previous snapshot or this one, never a mix, and never hold a writer's lock. It depends
on every other asset of the lake, so it is the last step of every run: `catalog_asset` is given them by
the definitions, from the assets loaded (dagster_project.definitions.study_assets)."""

from __future__ import annotations

from dagster import AssetsDefinition, MaterializeResult, MetadataValue, asset

from assets.common import REPORTS
from assets.resources import LakeResource
from warehouse.catalog import catalog_path, publish_catalog


def catalog_asset(deps) -> AssetsDefinition:
    """The `catalog` asset, after `deps` (every other asset key of the lake)."""
    return asset(
        name="catalog",
        group_name=REPORTS,
        kinds={"duckdb"},
        deps=deps,
        pool="duckdb_catalog",
        description=(
            "Commits the run's tables as one lake snapshot; autheval.duckdb: read-only views over that "
            "snapshot's Parquet files, for `autheval query`, notebooks and BI tools."
        ),
    )(catalog)


def catalog(lake: LakeResource):
    store = lake.lake()
    if not lake.owns_run() and store.run() is not None:  # joined (the demo): its opener commits, once
        return MaterializeResult(
            metadata={
                "committed": "with the run that opened the lake, when it ends",
                "views": ", ".join(store.tables()),
            }
        )
    lake.commit()
    path = catalog_path(store)
    if not path.exists():  # nothing to commit and no catalog yet (a lake written before snapshots)
        path = publish_catalog(store)
    served = store.snapshot()
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path)),
            "snapshot": served.snapshot,
            "committed_by_run": served.run_id,
            "views": ", ".join(store.tables()),
        }
    )
