"""image_hashes: perceptual hashes per image and declared kind ('autheval' = the study's DCT hash,
'imagehash' = the library's pHash); incremental, parallel over processes."""

from __future__ import annotations

from dagster import asset

from assets.common import DUPLICATES, connect_with, query, write_table
from assets.images import images
from autheval.reference_data import reference_path
from dagster_project.resources import LakeResource, SourceResource

KINDS = ("autheval", "imagehash")


@asset(group_name=DUPLICATES, kinds={"parquet"}, deps=[images], description=(
    "image_id, hash_kind, phash (UBIGINT), image_hash (16 hex), path, size, mtime_ns. A rerun hashes "
    "only new or changed files. Side table hash_failures: images that could not be decoded."))
def image_hashes(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    if source.is_reference:
        con = connect_with(store)
        con.register("phash_report", con.read_parquet(str(reference_path("phash_duplicate_report"))).arrow().read_all())
        return write_table(store, "image_hashes", query(con, "reference_image_hashes"), {"kinds": "autheval"},
                           note="published hashes of the study's report (1,777 images, all exact groups)")
    from autheval.raw.phash import hash_images

    previous = store.read("image_hashes") if store.table_path("image_hashes").exists() else None
    run = hash_images(store.read("images"), KINDS, workers=source.workers or None, previous=previous)
    store.write("hash_failures", run.failures)
    return write_table(store, "image_hashes", run.table, {"kinds": ",".join(KINDS)},
                       files_hashed=run.n_files_hashed, rows_reused=run.n_rows_reused,
                       failures=run.failures.num_rows, seconds=round(run.seconds, 2))
