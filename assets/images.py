"""images: one row per image (ids, lesion, metadata, reference state, path, source), with the
ingestion report and the input files' checksums beside it."""

from __future__ import annotations

import pyarrow as pa
from dagster import AssetCheckResult, asset, asset_check

from assets.common import INGEST, check_row, connect_with, query, write_table
from assets.reference import register_reference
from autheval.reference_data import manifest
from dagster_project.resources import LakeResource, SourceResource


@asset(group_name=INGEST, kinds={"parquet"}, description=(
    "Every image of the study: image_id, lesion_id, patient_id, age, sex, anatomic_site, diagnosis, "
    "risk_stratum (the reference state), path, source. Side tables: ingest_report (every row left out "
    "or repaired, and why) and input_files (SHA-256 of each input file)."))
def images(lake: LakeResource, source: SourceResource):
    source.check()
    store = lake.lake()
    if source.is_reference:
        table = query(register_reference(connect_with(store)), "images")
        files = pa.Table.from_pylist([{"name": k, **v} for k, v in sorted(manifest().items())])
        report = None
    else:
        from autheval.raw.ingest import ingest_isic2019

        ingested = ingest_isic2019(source.input_dir, checksums=source.kind == "isic2019")
        table, report, files = ingested.images, ingested.report, ingested.input_files
    store.write("input_files", files)
    if report is not None:
        store.write("ingest_report", report)
    return write_table(store, "images", table, {"source": source.kind},
                       images_with_reference_state=len(table.column("risk_stratum").drop_null()),
                       report_rows=0 if report is None else report.num_rows)


@asset_check(asset=images, description="image ids are unique")
def images_unique_ids(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "check_unique_images", [], {"checked": "images"})
    return AssetCheckResult(passed=row["duplicates"] == 0, metadata={k: str(v) for k, v in row.items()})
