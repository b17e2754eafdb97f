"""records: the role-separated record of every analysis, in the AuthEval log schema."""

from __future__ import annotations

from dagster import asset

from assets.clusters import clusters
from assets.common import SCORING, lake_query, write_table
from assets.resources import LakeResource, SourceResource
from assets.scores import scores
from assets.selections import selections


@asset(
    group_name=SCORING,
    kinds={"parquet"},
    deps=[selections, scores, clusters],
    description=(
        "The AuthEval log view of each analysis: case_id, cluster_id, proposed_action, executed_action, "
        "utility_executed_local, utility_proposed_local, utility_proposed_global, record_level. Exported "
        "records carry scores, never the private context."
    ),
)
def records(lake: LakeResource, source: SourceResource):
    if source.is_reference:
        table = lake_query(lake.lake(), "review/records", ["selections", "scores", "clusters"])
    else:
        table = lake_query(lake.lake(), "review/records_of_review", ["selections", "scores"])
    return write_table(
        lake.lake(), "records", table, analyses=", ".join(sorted(set(table.column("analysis").to_pylist())))
    )
