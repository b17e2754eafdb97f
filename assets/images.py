"""The ingest step: every input file read once. `images` (one row per usable image), its perceptual
hashes, the images that could not be decoded, the ingestion report and the input files' checksums,
declared as one multi-asset so that each side table has its own lineage.

For a raw cohort this is `autheval.raw.pipeline.read_cohort`, the same function `run_raw_path` runs
first; for the reference study the tables come from the embedded traces and published hashes."""

from __future__ import annotations

import pyarrow as pa
from dagster import AssetCheckResult, asset_check, multi_asset

from assets.common import INGEST, check_row, connect_with, table_spec, write_table
from assets.resources import LakeResource, SourceResource
from autheval.raw.ingest import REPORT_SCHEMA
from autheval.raw.phash import FAILURES_SCHEMA
from autheval.raw.pipeline import DEFAULT_KINDS, read_cohort
from autheval.reference_data import manifest, reference_path, register_reference
from warehouse import sql

KINDS = DEFAULT_KINDS  # hash kinds: 'autheval' (the study's) and 'imagehash'

SPECS = [  # in the order they are written (each after what it depends on)
    table_spec(
        "input_files",
        INGEST,
        [],
        "role, path, bytes, sha256, expected_sha256, checksum_ok: every input file (metadata, labels, "
        "images folder or zip) with its SHA-256, compared with the published one for official files.",
    ),
    table_spec(
        "image_hashes",
        INGEST,
        ["input_files"],
        "image_id, hash_kind, phash (UBIGINT), image_hash (16 hex), path, size, mtime_ns, format (the "
        "format found in the file's bytes): perceptual hashes per readable image and declared kind. A "
        "rerun hashes only new or changed files.",
    ),
    table_spec(
        "hash_failures",
        INGEST,
        ["input_files"],
        "image_id, path, error: the images that could not be read or decoded (left out of images, one "
        "unreadable_image row each in ingest_report).",
    ),
    table_spec(
        "images",
        INGEST,
        ["input_files", "hash_failures"],
        "Every usable image of the study: image_id, lesion_id, patient_id, age, sex, anatomic_site, "
        "diagnosis, risk_stratum (the reference state), path, source, fitzpatrick_skin_type (where the "
        "source records a valid one), ita, ita_category, ita_method (the skin tone estimated from the "
        "pixels around the lesion: an estimate, not a label). Unreadable images are left out and "
        "reported in ingest_report.",
    ),
    table_spec(
        "ingest_report",
        INGEST,
        ["input_files", "image_hashes", "hash_failures"],
        "source, row_number, image_id, column_name, reason, value, action: one row per problem found "
        "while reading the inputs (excluded, kept, ignored or recorded), e.g. missing_image, "
        "unreadable_image, format_mismatch, checksum_mismatch, outside_input_folder (an id, path or link "
        "that leads out of the input folder: never read), invalid_isic_metadata and "
        "inconsistent_isic_metadata (a value the ISIC Archive's schema refuses: the field and the value; "
        "kept). Nothing is dropped silently.",
    ),
]


@multi_asset(specs=SPECS, name="ingest")
def ingest(context, lake: LakeResource, source: SourceResource):
    source.check()
    store = lake.lake()
    extra: dict[str, dict] = {}
    if source.is_reference:
        tables = _reference_tables(store)
    else:
        previous = store.read("image_hashes") if store.has_table("image_hashes") else None
        cohort = read_cohort(
            source.input_dir,
            kinds=KINDS,
            workers=source.workers or None,
            previous_hashes=previous,
            checksums=source.kind == "isic2019",
        )
        tables = cohort.tables()
        run = cohort.hashing
        extra["image_hashes"] = dict(
            files_hashed=run.n_files_hashed, rows_reused=run.n_rows_reused, seconds=round(run.seconds, 2)
        )
        context.log.info(
            f"hashed {run.n_files_hashed} files in {run.seconds:.1f} s, reused {run.n_rows_reused} rows; "
            f"{run.failures.num_rows} unreadable"
        )
    extra["images"] = dict(images_with_reference_state=len(tables["images"].column("risk_stratum").drop_null()))
    for spec in SPECS:
        name = spec.key.to_user_string()
        yield write_table(store, name, tables[name], {"source": source.kind}, asset_key=name, **extra.get(name, {}))


def _reference_tables(store) -> dict[str, pa.Table]:
    """The reference study's ingest tables: images from the frozen split and traces, the published
    hashes, the embedded files' checksums; nothing unreadable or to report."""
    con = register_reference(connect_with(store))
    con.register("phash_report", con.read_parquet(str(reference_path("phash_duplicate_report"))).arrow().read_all())
    return {
        "input_files": pa.Table.from_pylist([{"name": k, **v} for k, v in sorted(manifest().items())]),
        "image_hashes": sql.run(con, "ingest/reference_image_hashes"),
        "hash_failures": FAILURES_SCHEMA.empty_table(),
        "images": sql.run(con, "ingest/images_reference"),
        "ingest_report": REPORT_SCHEMA.empty_table(),
    }


@asset_check(asset="images", description="image ids are unique")
def images_unique_ids(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "ingest/check_unique_images", [], {"checked": "images"})
    return AssetCheckResult(passed=row["duplicates"] == 0, metadata={k: str(v) for k, v in row.items()})
