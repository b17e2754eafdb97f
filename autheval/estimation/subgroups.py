"""Subgroups and fairness (DermoGPT section 3) on the review's records.

Per declared grouping (sex, age band, anatomic site, workflow profile, source, the Fitzpatrick skin type
where a source records it, and `ita_category`, the skin tone estimated from the pixels, an estimate and
not a label: autheval/raw/skin_tone.py) and group: the authority-gap estimators with a whole-cluster bootstrap within
the group, and the accuracy and balanced accuracy of the proposal and of the selected action against the reference
level. A group below the declared minimum size is reported as not estimable, with the reason, never as a
number. `fairness` is min/max group accuracy per grouping, for both roles.

SQL: sql/estimates/subgroup_members.sql, sql/estimates/subgroup_accuracy.sql, sql/estimates/subgroup_records.sql,
sql/estimates/fairness.sql.
No Dagster imports: the lake's `subgroups` asset calls `subgroup_tables` in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from autheval.estimation.estimators import DEFAULT_REPS, estimate
from autheval.estimation.study import estimates_table
from autheval.records.recordsets import recordsets_by
from warehouse.sql import connect, load_sql, to_table

GROUPINGS = ("sex", "age_band", "anatomic_site", "profile", "source", "fitzpatrick_skin_type", "ita_category")
MIN_CLUSTERS = 30  # fewer clusters in a group: its bootstrap interval is not trustworthy
MIN_IMAGES = 30
IMAGE_COLUMNS = (
    "image_id",
    "sex",
    "age",
    "anatomic_site",
    "source",
    "fitzpatrick_skin_type",
    "ita_category",
    "ideal_action_level",
)
GROUP_COLUMNS = (
    "analysis",
    "grouping",
    "group_value",
    "n_images",
    "n_clusters",
    "estimable",
    "reason",
    "accuracy_proposal",
    "balanced_accuracy_proposal",
    "accuracy_selected",
    "balanced_accuracy_selected",
)


@dataclass(frozen=True)
class SubgroupTables:
    subgroups: pa.Table  # group columns + (unit, metric, estimate, interval, ...) per estimable group
    fairness: pa.Table
    groups: pa.Table  # one row per (analysis, grouping, group): sizes, accuracies, estimable, reason


def no_images() -> pa.Table:
    """An images table with no rows (a lake of records without a cohort): every group table is empty."""
    types = {"age": pa.float64(), "ideal_action_level": pa.int32()}
    return pa.table({c: pa.array([], types.get(c, pa.string())) for c in IMAGE_COLUMNS})


def _images_with_every_column(images: pa.Table) -> pa.Table:
    """The grouping columns a source lacks (e.g. Fitzpatrick type in ISIC, skin tone in the reference
    study's images) as all-missing columns."""
    columns = {}
    for name in IMAGE_COLUMNS:
        columns[name] = images.column(name) if name in images.column_names else pa.nulls(images.num_rows, pa.string())
    return pa.table(columns)


def subgroup_tables(
    records: pa.Table,
    images: pa.Table,
    contexts: pa.Table,
    groupings=GROUPINGS,
    min_clusters: int = MIN_CLUSTERS,
    min_images: int = MIN_IMAGES,
    reps: int = DEFAULT_REPS,
    scheme: str = "reference",
    seed: int | None = None,
) -> SubgroupTables:
    """Estimators, accuracies and fairness per (analysis, grouping, group) of a review's records."""
    unknown = sorted(set(groupings) - set(GROUPINGS))
    if unknown:
        raise ValueError(f"unknown grouping {unknown[0]!r}: declared groupings are {', '.join(GROUPINGS)}")
    con = connect()
    con.register("records", records)
    con.register("images", _images_with_every_column(images))
    con.register("contexts", contexts.select(["cluster_id", "profile"]))
    to_table(con, "subgroup_members", "estimates/subgroup_members", {"groupings": list(groupings)})
    sizes = con.execute(load_sql("estimates/subgroup_accuracy")).arrow().read_all()

    estimable: list[bool] = []
    reasons: list[str | None] = []
    for n_images, n_clusters, _value in zip(
        sizes.column("n_images").to_pylist(),
        sizes.column("n_clusters").to_pylist(),
        sizes.column("group_value").to_pylist(),
    ):
        if n_clusters < min_clusters or n_images < min_images:
            estimable.append(False)
            reasons.append(
                f"not estimable: {n_images} images in {n_clusters} clusters "
                f"(declared minimum {min_images} images, {min_clusters} clusters)"
            )
        else:
            estimable.append(True)
            reasons.append(None)
    groups = sizes.append_column("estimable", pa.array(estimable, pa.bool_())).append_column(
        "reason", pa.array(reasons, pa.string())
    )
    groups = groups.select(list(GROUP_COLUMNS))
    con.register("subgroup_sizes", groups)
    fairness = con.execute(load_sql("estimates/fairness")).arrow().read_all()

    wanted = groups.filter(pc.field("estimable"))
    keys = list(zip(*(wanted.column(c).to_pylist() for c in ("analysis", "grouping", "group_value"))))
    labels = {f"{a} | {g} = {v}": (a, g, v) for a, g, v in keys}
    result = None
    if labels:
        recordsets = recordsets_by(
            con,
            "subgroup_members",
            "estimates/subgroup_records",
            [(label, {"analysis": a, "grouping": g, "group_value": v}) for label, (a, g, v) in labels.items()],
        )
        result = estimate(recordsets, scheme=scheme, reps=reps, seed=seed)
    con.register("subgroup_estimates", estimates_table(result))
    con.register(
        "subgroup_labels",
        pa.table(
            {
                "label": pa.array(list(labels), pa.string()),
                **{
                    c: pa.array([k[i] for k in labels.values()], pa.string())
                    for i, c in enumerate(("analysis", "grouping", "group_value"))
                },
            }
        ),
    )
    subgroups = con.execute(load_sql("estimates/subgroups")).arrow().read_all()
    return SubgroupTables(subgroups, fairness, groups)
