"""The whole raw-data path in one call, for a cohort folder in the official ISIC 2019 layout:
ingest -> perceptual hashes -> exact groups and declared near-duplicate rules -> clusters -> splits.

The path is four steps, and `run_raw_path` is nothing but the four in order; the Dagster assets call
the same four functions, so the lake's tables are the library's tables:

1. `read_cohort`: ingest the files, hash every image (incrementally), leave out the images that cannot
   be decoded (an `unreadable_image` row in the report) and note files whose bytes are not the format
   their name says (`format_mismatch`, kept), and estimate each image's skin tone (`ita`,
   `ita_category`: autheval/raw/skin_tone.py, an estimate, not a label): images, image_hashes,
   hash_failures, ingest_report, input_files.
2. `find_duplicate_tables`: exact groups and the declared near-duplicate rules: duplicates,
   duplicate_removals.
3. `cluster_images`: clusters of the images left after 'drop' rules, and their split (a frozen split,
   validated, or AuthEval's split algorithm): clusters.
4. `duplicates.with_splits`: the duplicates with their splits and cross-split flags: duplicate_report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autheval.raw.clusters import assign_clusters
from autheval.raw.duplicates import AUTHEVAL_RULES, exact_groups, find_duplicates, removals, union_groups, with_splits
from autheval.raw.ingest import Ingested, ingest_isic2019, report_table
from autheval.raw.phash import HashRun, hash_images, hashes_of_kind, named_format
from autheval.raw.skin_tone import with_skin_tone
from autheval.raw.splits import SPLIT_SEED, assign_splits, check_no_cluster_crosses_split, read_freeze, validate_freeze

DEFAULT_KINDS = ("autheval", "imagehash")


def hash_kinds(kinds=DEFAULT_KINDS, rules=AUTHEVAL_RULES) -> tuple[str, ...]:
    """The kinds to hash: 'autheval' (exact groups and cluster ids use it), the requested ones and every
    rule's kind."""
    return tuple(dict.fromkeys(("autheval", *kinds, *(r.hash_kind for r in rules))))


def screen_images(ingested: Ingested, hashed: HashRun) -> tuple[pa.Table, pa.Table]:
    """(images, ingest_report) after hashing: images that could not be decoded leave `images` and join
    the report ('unreadable_image', excluded); a file whose bytes are another format than its name says
    is kept and reported ('format_mismatch', with both formats)."""
    rows = ingested.report.to_pylist()
    row_of = dict(zip(ingested.images.column("image_id").to_pylist(), ingested.images.column("row_index").to_pylist()))
    source = ingested.input_files.column("path")[0].as_py() if ingested.input_files.num_rows else None

    def row(image_id, reason, value, action):
        return dict(
            source=source,
            row_number=row_of.get(image_id, -1) + 1,
            image_id=image_id,
            column_name=None,
            reason=reason,
            value=value,
            action=action,
        )

    failures = hashed.failures
    for r in failures.to_pylist():
        rows.append(row(r["image_id"], "unreadable_image", r["error"], "excluded"))
    seen = set()
    for r in hashed.table.select(["image_id", "path", "format"]).to_pylist():
        named = named_format(r["path"] or "")
        if r["image_id"] in seen or r["format"] is None or named is None or named == r["format"]:
            continue
        seen.add(r["image_id"])
        rows.append(row(r["image_id"], "format_mismatch", f"named {named}, holds {r['format']}: {r['path']}", "kept"))
    images = ingested.images
    if failures.num_rows:
        bad = pa.array(sorted(set(failures.column("image_id").to_pylist())), pa.string())
        images = images.filter(pc.invert(pc.is_in(images.column("image_id"), value_set=bad)))
    return images, report_table(rows)


@dataclass(frozen=True)
class Cohort:
    """What reading a cohort folder produced (step 1), and how much hashing it took."""

    images: pa.Table
    image_hashes: pa.Table
    hash_failures: pa.Table
    ingest_report: pa.Table
    input_files: pa.Table
    hashing: HashRun

    def tables(self) -> dict[str, pa.Table]:
        return {
            "input_files": self.input_files,
            "image_hashes": self.image_hashes,
            "hash_failures": self.hash_failures,
            "images": self.images,
            "ingest_report": self.ingest_report,
        }


def read_cohort(
    input_dir: str | Path,
    *,
    kinds=DEFAULT_KINDS,
    rules=AUTHEVAL_RULES,
    workers: int | None = None,
    previous_hashes: pa.Table | None = None,
    progress: bool | None = None,
    source: str | None = None,
    checksums: bool = True,
) -> Cohort:
    """Step 1: ingest the cohort's files, hash its images, screen out the unreadable ones, estimate the
    skin tone of the rest."""
    ingested = ingest_isic2019(input_dir, source=source, checksums=checksums)
    hashed = hash_images(
        ingested.images, hash_kinds(kinds, rules), workers=workers, previous=previous_hashes, progress=progress
    )
    images, report = screen_images(ingested, hashed)
    images = with_skin_tone(images, workers=workers)
    image_hashes = hashed.table.filter(pc.is_in(hashed.table.column("image_id"), value_set=images.column("image_id")))
    return Cohort(images, image_hashes, hashed.failures, report, ingested.input_files, hashed)


def find_duplicate_tables(image_hashes: pa.Table, rules=AUTHEVAL_RULES) -> tuple[pa.Table, pa.Table]:
    """Step 2: (duplicates, duplicate_removals) of the declared rules."""
    duplicates = find_duplicates(image_hashes, rules)
    return duplicates, removals(duplicates)


def cluster_images(
    images: pa.Table,
    image_hashes: pa.Table,
    duplicates: pa.Table,
    duplicate_removals: pa.Table | None = None,
    *,
    freeze: str | Path | pa.Table | None = None,
    seed: int = SPLIT_SEED,
    key_rule: str = "auto",
) -> pa.Table:
    """Step 3: the clusters (image_id, cluster_id, base_node, duplicate_group, cluster_size, split_key,
    split, split_source) of the images a 'drop' rule did not remove; the split is `freeze` (validated)
    when given, else AuthEval's split algorithm with `seed`. Raises if a cluster would cross a split."""
    kept = images
    if duplicate_removals is not None and duplicate_removals.num_rows:
        gone = duplicate_removals.column("removed_image_id")
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
            "split", pa.array([split_of[i] for i in clusters.column("image_id").to_pylist()], pa.string())
        )
        split_source = "frozen"
    else:
        splits = assign_splits(clusters, kept, seed=seed)
        clusters = clusters.append_column("split", splits.column("split"))
        split_source = "computed"
    check_no_cluster_crosses_split(clusters)
    return clusters.append_column("split_source", pa.array([split_source] * clusters.num_rows, pa.string()))


def duplicate_report(duplicates: pa.Table, clusters: pa.Table) -> pa.Table:
    """Step 4: the duplicates with their splits and cross-split flags (no second search)."""
    return with_splits(duplicates, clusters.select(["image_id", "split"]))


def run_raw_path(
    input_dir: str | Path,
    seed: int = SPLIT_SEED,
    workers: int | None = None,
    *,
    kinds=DEFAULT_KINDS,
    rules=AUTHEVAL_RULES,
    key_rule: str = "auto",
    freeze: str | Path | pa.Table | None = None,
    previous_hashes: pa.Table | None = None,
    progress: bool | None = None,
    source: str | None = None,
    checksums: bool = True,
) -> dict[str, pa.Table]:
    """Run the raw path on a cohort folder (official ISIC 2019 file names; images as folder or zip).

    seed: the split RNG seed (AuthEval 20260706). workers: hashing processes (default all cores).
    kinds: hash kinds to compute ('autheval' is always added: exact groups and cluster ids use it).
    rules: declared near-duplicate rules (duplicates.DuplicateRule: threshold, use, hash_kind).
    freeze: a split_freeze table or file; when given it is validated and used instead of a new split.
    previous_hashes: the last image_hashes table, so only new or changed files are hashed.
    checksums: compute the input files' SHA-256 and compare official file names with the published ones.

    Returns the lake's raw-path tables, by name: input_files, images, image_hashes, hash_failures,
    ingest_report, duplicates, duplicate_removals, clusters (image_id, cluster_id, split, ...) and
    duplicate_report (the duplicates with splits and cross-split flags).
    """
    cohort = read_cohort(
        input_dir,
        kinds=kinds,
        rules=rules,
        workers=workers,
        previous_hashes=previous_hashes,
        progress=progress,
        source=source,
        checksums=checksums,
    )
    duplicates, dropped = find_duplicate_tables(cohort.image_hashes, rules)
    clusters = cluster_images(
        cohort.images, cohort.image_hashes, duplicates, dropped, freeze=freeze, seed=seed, key_rule=key_rule
    )
    return {
        **cohort.tables(),
        "duplicates": duplicates,
        "duplicate_removals": dropped,
        "clusters": clusters,
        "duplicate_report": duplicate_report(duplicates, clusters),
    }
