"""subgroups and fairness (DermoGPT section 3): the authority gap and the accuracy of both roles per
declared group (sex, age band, anatomic site, workflow profile, source, Fitzpatrick skin type where a
source records it, ita_category: the skin tone estimated from the pixels, an estimate, not a label), and
min/max group accuracy per grouping with its bootstrap interval. The statistics are autheval/estimation/subgroups.py."""

from __future__ import annotations

import pyarrow as pa
from dagster import ResourceParam, multi_asset

from assets.common import ESTIMATES, table_specs, write_table
from assets.resources import DeclaredRules, LakeResource, SourceResource
from autheval.estimation.estimators import DEFAULT_SEEDS
from autheval.estimation.multiplicity import adjust_subgroups, flagged
from autheval.estimation.provenance import analysis_names, run_provenance, stamp, with_names
from autheval.estimation.subgroups import GROUPINGS, no_images, subgroup_tables
from autheval.records.recordsets import recordsets_by
from warehouse.sql import connect


@multi_asset(
    specs=table_specs(
        ESTIMATES,
        ["records", "images", "contexts", "declared_rules"],
        subgroups=(
            "analysis, grouping, group_value, n_images, n_clusters, estimable, reason, accuracy and balanced "
            "accuracy of the proposal and of the selected action, then unit, metric, estimate and interval of "
            "a whole-cluster bootstrap within the group; groups under the declared minimum are not estimable. "
            "For the gaps: excludes_zero, p_value, p_adjusted (Holm), q_value (BH) over the family of every "
            "estimable group of the analysis in one unit and metric, excludes_zero_adjusted."
        ),
        fairness=(
            "analysis, grouping, min/max group accuracy for the proposal and for the selected action "
            "(1 = every group equally accurate), over the estimable groups with a known value, each ratio with "
            "its 95% whole-cluster bootstrap interval from the analysis's own replicates (scheme, seed, reps, "
            "unit named); a ratio whose best group's accuracy interval includes 0 is not estimable (reason)."
        ),
    ),
)
def subgroups(context, lake: LakeResource, source: SourceResource, rules: ResourceParam[DeclaredRules]):
    store = lake.lake()
    records = store.read("records")
    contexts = (
        store.read("contexts")
        if "contexts" in store.tables()
        else pa.table({"cluster_id": pa.array([], pa.string()), "profile": pa.array([], pa.string())})
    )
    images = store.read("images") if "images" in store.tables() else no_images()
    out = subgroup_tables(
        records,
        images,
        contexts,
        groupings=GROUPINGS,
        min_clusters=source.min_group_clusters,
        min_images=source.min_group_clusters,
        reps=source.reps,
    )
    provenance, analysis_rules = run_provenance(
        records, rules.rule_file(), "duckdb", "reference", DEFAULT_SEEDS["reference"], source.reps
    )
    names = analysis_names(records)
    hashes = analysis_hashes(records)
    table = with_names(stamp(adjust_subgroups(out.subgroups), provenance, hashes, rules=analysis_rules), names)
    fairness = with_names(stamp(out.fairness, provenance, hashes, rules=analysis_rules), names)
    estimable = sum(out.groups.column("estimable").to_pylist())
    context.log.info(f"{out.groups.num_rows} groups, {estimable} estimable")
    yield write_table(
        store,
        "subgroups",
        table,
        asset_key="subgroups",
        groups=out.groups.num_rows,
        estimable_groups=estimable,
        min_group_clusters=source.min_group_clusters,
        excluding_zero=flagged(table, adjusted=False),
        excluding_zero_adjusted=flagged(table),
    )
    yield write_table(store, "fairness", fairness, asset_key="fairness")


def analysis_hashes(records: pa.Table) -> dict[str, str]:
    """analysis -> the data hash of its record set (the one `estimates` names)."""
    con = connect()
    con.register("records", records)
    analyses = dict.fromkeys(records.column("analysis").to_pylist())
    return {
        r.analysis: r.data_sha256
        for r in recordsets_by(con, "records", "records/records_of_analysis", [(a, {"analysis": a}) for a in analyses])
    }
