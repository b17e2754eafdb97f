"""Subgroups and fairness (DermoGPT section 3) on the review's records.

Per declared grouping (sex, age band, anatomic site, workflow profile, source, the Fitzpatrick skin type
where a source records it, and `ita_category`, the skin tone estimated from the pixels, an estimate and
not a label: autheval/raw/skin_tone.py) and group: the authority-gap estimators with a whole-cluster bootstrap within
the group, and the accuracy and balanced accuracy of the proposal and of the selected action against the reference
level. A group below the declared minimum size is reported as not estimable, with the reason, never as a
number. `fairness` is min/max group accuracy per grouping, for both roles, each ratio with a 95%
whole-cluster bootstrap interval drawn from the replicates of the analysis's own estimates (the same
scheme, seed, replicates and clusters: `fairness_intervals`); a ratio whose best group's accuracy has an
interval that includes 0 is not estimable (no number, a reason).

SQL: sql/estimates/subgroup_members.sql, sql/estimates/subgroup_accuracy.sql, sql/estimates/subgroup_records.sql,
sql/estimates/fairness_compared.sql, sql/estimates/fairness_cluster_stats.sql, sql/estimates/fairness_groups.sql,
sql/estimates/fairness.sql.
No Dagster imports: the lake's `subgroups` asset calls `subgroup_tables` in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autheval.estimation.bootstrap import poisson_products, product_blocks
from autheval.estimation.estimators import DEFAULT_REPS, DEFAULT_SEEDS, estimate
from autheval.estimation.multiplicity import DEFAULT_QUANTILES
from autheval.estimation.study import estimates_table
from autheval.records.recordsets import recordsets_by
from warehouse.sql import connect, load_sql, run, to_table

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
    fairness = fairness_intervals(con, scheme, reps, DEFAULT_SEEDS[scheme] if seed is None else seed)

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


# a compared group's replicate sums per reference level: its images, the proposal's and the selection's hits
FAIRNESS_SUMS = ("n", "hits_proposal", "hits_selected")


def fairness_intervals(
    con, scheme: str, reps: int, seed: int, quantiles: tuple[float, float] = DEFAULT_QUANTILES
) -> pa.Table:
    """The fairness table of `subgroup_sizes` and `subgroup_members` on `con`, each ratio with its whole-cluster
    bootstrap interval. Why these replicates: a grouping's groups can share clusters (a patient's lesions at two
    sites, images of one lesion with two estimated skin tones), so the groups are resampled together, by the
    clusters of the analysis; the reference scheme (and evaluator, which has no accuracy of its own) draws
    numpy's stream of `seed` over the analysis's G clusters in ascending cluster_id order, the very
    multiplicities of the analysis's estimates, and poisson its Poisson(1) weights of the same ranks
    (autheval/estimation/bootstrap.py). The statistics are SQL: sql/estimates/fairness_compared.sql (the
    point's worst and best groups), sql/estimates/fairness_cluster_stats.sql (their per-cluster counts),
    sql/estimates/fairness.sql (ratios, intervals, the not-estimable rule)."""
    to_table(con, "fairness_compared", "estimates/fairness_compared")
    to_table(con, "fairness_cluster_stats", "estimates/fairness_cluster_stats")
    to_table(con, "fairness_groups", "estimates/fairness_groups")
    stats = con.table("fairness_cluster_stats").arrow().read_all()
    parts = [_fairness_sums_table("", 0, np.empty((0, 0)), 0, 1)]  # the columns, where nothing is compared
    for analysis in dict.fromkeys(stats.column("analysis").to_pylist()):
        rows = stats.filter(pc.equal(stats.column("analysis"), analysis))
        g, levels = int(rows.column("n_clusters")[0].as_py()), int(rows.column("n_levels")[0].as_py())
        groups = int(pc.max(rows.column("group_index")).as_py()) + 1
        width = groups * levels  # one statistic's columns: group-major, level slots within
        matrix = np.zeros((g, len(FAIRNESS_SUMS) * width), dtype=np.float64)
        rank = rows.column("cluster_rank").to_numpy()
        column = rows.column("group_index").to_numpy() * levels + rows.column("level_slot").to_numpy()
        for j, name in enumerate(FAIRNESS_SUMS):
            matrix[rank, j * width + column] = rows.column(name).to_numpy()
        if reps and scheme == "poisson":
            parts.append(_fairness_sums_table(analysis, 0, poisson_products(seed, 0, reps, matrix), groups, levels))
        elif reps:
            blocks = product_blocks(seed, reps, matrix)
            parts.extend(_fairness_sums_table(analysis, start, sums, groups, levels) for start, sums in blocks)
    con.register("fairness_replicate_sums", pa.concat_tables(parts))
    method = "bootstrap_poisson" if scheme == "poisson" else "bootstrap_reference"
    lower, upper = quantiles
    params = {"lower": lower, "upper": upper, "interval_method": method, "scheme": scheme, "seed": seed, "reps": reps}
    return run(con, "estimates/fairness", params)


def _fairness_sums_table(analysis: str, start: int, sums: np.ndarray, groups: int, levels: int) -> pa.Table:
    """Replicate sums (rows x 3 x groups x levels) as one row per group and replicate: analysis, group_index,
    rep, and n, hits_proposal, hits_selected as lists over the level slots (summed in order in SQL, so the
    same inputs give the same last bit)."""
    rows = sums.shape[0]
    width = groups * levels
    offsets = pa.array(np.arange(0, rows * width + 1, levels, dtype=np.int32))

    def per_level(j: int) -> pa.Array:
        return pa.ListArray.from_arrays(
            offsets, pa.array(np.ascontiguousarray(sums[:, j * width : (j + 1) * width]).ravel())
        )

    return pa.table(
        {
            "analysis": pa.array([analysis] * (rows * groups), pa.string()),
            "group_index": pa.array(np.tile(np.arange(groups, dtype=np.int32), rows)),
            "rep": pa.array(np.repeat(np.arange(start, start + rows, dtype=np.int64), groups)),
            **{name: per_level(j) for j, name in enumerate(FAIRNESS_SUMS)},
        }
    )
