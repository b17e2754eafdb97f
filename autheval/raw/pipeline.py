"""The whole raw-data path in one call, for a cohort folder in the official ISIC 2019 layout:
ingest -> perceptual hashes -> exact groups and declared near-duplicate rules -> clusters -> splits.

Each step is also a plain function (ingest.ingest_isic2019, phash.hash_images,
duplicates.find_duplicates, clusters.assign_clusters, splits.assign_splits / validate_freeze), so the
Dagster assets can call them one by one; this module only fixes the order and the hand-overs.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autheval.raw.clusters import assign_clusters
from autheval.raw.duplicates import AUTHEVAL_RULES, exact_groups, find_duplicates, removals, union_groups
from autheval.raw.ingest import Ingested, ingest_isic2019, report_table
from autheval.raw.phash import HashRun, hash_images, hashes_of_kind
from autheval.raw.splits import SPLIT_SEED, assign_splits, check_no_cluster_crosses_split, read_freeze, validate_freeze


def exclude_unreadable(ingested: Ingested, hashed: HashRun) -> tuple[pa.Table, pa.Table]:
    """Images that could not be decoded leave `images` and join the report ('unreadable_image')."""
    failures = hashed.failures
    if failures.num_rows == 0:
        return ingested.images, ingested.report
    bad = set(failures.column("image_id").to_pylist())
    rows = ingested.report.to_pylist()
    row_of = dict(zip(ingested.images.column("image_id").to_pylist(), ingested.images.column("row_index").to_pylist()))
    source = ingested.input_files.column("path")[0].as_py() if ingested.input_files.num_rows else None
    for r in failures.to_pylist():
        rows.append(dict(source=source, row_number=row_of.get(r["image_id"], -1) + 1, image_id=r["image_id"],
                         column_name=None, reason="unreadable_image", value=r["error"], action="excluded"))
    keep = pc.invert(pc.is_in(ingested.images.column("image_id"), value_set=pa.array(sorted(bad), pa.string())))
    return ingested.images.filter(keep), report_table(rows)


def run_raw_path(
    input_dir: str | Path,
    seed: int = SPLIT_SEED,
    workers: int | None = None,
    *,
    kinds=("autheval", "imagehash"),
    rules=AUTHEVAL_RULES,
    key_rule: str = "auto",
    freeze: str | Path | pa.Table | None = None,
    previous_hashes: pa.Table | None = None,
    progress: bool | None = None,
    source: str | None = None,
) -> dict[str, pa.Table]:
    """Run the raw path on a cohort folder (official ISIC 2019 file names; images as folder or zip).

    seed: the split RNG seed (AuthEval 20260706). workers: hashing processes (default all cores).
    kinds: hash kinds to compute ('autheval' is always added: exact groups and cluster ids use it).
    rules: declared near-duplicate rules (duplicates.DuplicateRule: threshold, use, hash_kind).
    freeze: a split_freeze table or file; when given it is validated and used instead of a new split.
    previous_hashes: the last image_hashes table, so only new or changed files are hashed.

    Returns Arrow tables: images, image_hashes, hash_failures, duplicates, duplicate_removals,
    clusters (image_id, cluster_id, split, ...), ingest_report, input_files.
    """
    ingested = ingest_isic2019(input_dir, source=source)
    kinds = tuple(dict.fromkeys(("autheval", *kinds, *(r.hash_kind for r in rules))))
    hashed = hash_images(ingested.images, kinds, workers=workers, previous=previous_hashes, progress=progress)
    images, report = exclude_unreadable(ingested, hashed)
    image_hashes = hashed.table.filter(pc.is_in(hashed.table.column("image_id"), value_set=images.column("image_id")))

    duplicates = find_duplicates(image_hashes, rules)
    dropped = removals(duplicates)
    kept = images
    if dropped.num_rows:
        gone = dropped.column("removed_image_id")
        kept = images.filter(pc.invert(pc.is_in(images.column("image_id"), value_set=gone)))
    kept_hashes = image_hashes.filter(pc.is_in(image_hashes.column("image_id"), value_set=kept.column("image_id")))
    groups = exact_groups(hashes_of_kind(kept_hashes, "autheval"))
    clusters = assign_clusters(kept, groups, union_groups(duplicates), key_rule=key_rule)

    if freeze is not None:
        given = isinstance(freeze, pa.Table)
        frozen = freeze if given else read_freeze(freeze)
        splits = validate_freeze(frozen, clusters, source="split_freeze" if given else str(freeze))
        split_of = dict(zip(splits.column("image_id").to_pylist(), splits.column("split").to_pylist()))
        clusters = clusters.append_column(
            "split", pa.array([split_of[i] for i in clusters.column("image_id").to_pylist()], pa.string()))
        split_source = "frozen"
    else:
        splits = assign_splits(clusters, kept, seed=seed)
        clusters = clusters.append_column("split", splits.column("split"))
        split_source = "computed"
    check_no_cluster_crosses_split(clusters)
    clusters = clusters.append_column("split_source", pa.array([split_source] * clusters.num_rows, pa.string()))
    duplicates = find_duplicates(image_hashes, rules, splits=clusters.select(["image_id", "split"]))
    return {
        "images": images,
        "image_hashes": image_hashes,
        "hash_failures": hashed.failures,
        "duplicates": duplicates,
        "duplicate_removals": dropped,
        "clusters": clusters,
        "ingest_report": report,
        "input_files": ingested.input_files,
    }
