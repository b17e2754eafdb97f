"""selections: what the local authority selected, per analysis (mechanism x review regime) and image."""

from __future__ import annotations

from dagster import asset

from assets.common import REVIEW, connect_with, query, write_table
from assets.proposals import proposals
from assets.reference import register_reference
from dagster_project.resources import LakeResource, SourceResource


@asset(group_name=REVIEW, kinds={"parquet"}, deps=[proposals], description=(
    "analysis, study, mechanism, regime, image_id, a_head, a_sel, change_type: the proposal and the "
    "action the local service selected under each review regime (mixed, capacity ceiling, safety floor)."))
def selections(lake: LakeResource, source: SourceResource):
    source.require_reference("selections")
    table = query(register_reference(connect_with(lake.lake())), "selections")
    changed = sum(1 for t in table.column("change_type").to_pylist() if t != "none")
    return write_table(lake.lake(), "selections", table, changed_rows=changed)
