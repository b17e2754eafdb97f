"""landed_records: role-separated logs dropped into the landing folder, one partition per file.

The sensor registers each new file as a partition and asks for its run. A malformed file fails its own
run with the one-line reason and is moved to landing/rejected/ (with a .reason.txt); the other
partitions stay as they were."""

from __future__ import annotations

from dagster import (
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    Failure,
    RunRequest,
    SensorResult,
    asset,
    define_asset_job,
    sensor,
)

from assets.common import RECURRING
from autheval.errors import RecordError
from autheval.landing import landed_files, locate, mark_processed, partition_key, read_landed, set_aside
from dagster_project.resources import LakeResource

landed_logs = DynamicPartitionsDefinition(name="landed_logs")


@asset(group_name=RECURRING, kinds={"parquet"}, partitions_def=landed_logs, description=(
    "One landed role-separated log per partition (AuthEval log schema + timestamp or batch), validated, "
    "with its reporting period; lake table landed_records/<file>.parquet."))
def landed_records(context, lake: LakeResource):
    key = context.partition_key
    path = locate(lake.landing_dir(), key)
    try:
        records, table = read_landed(path)
    except RecordError as err:
        moved = set_aside(path, str(err))
        context.log.error(f"rejected {path.name}: {err} (moved to {moved})")
        raise Failure(description=f"rejected {path.name}: {err}", metadata={"moved_to": str(moved)}) from err
    store = lake.lake()
    store.write_partition("landed_records", key, table, {"source": str(path), "data_sha256": records.data_sha256})
    processed = mark_processed(path)
    periods = sorted(set(table.column("period").to_pylist()))
    return _materialized(table, records, processed, periods)


def _materialized(table, records, processed, periods):
    from dagster import MaterializeResult, MetadataValue

    return MaterializeResult(metadata={
        "rows": table.num_rows, "clusters": records.n_clusters, "record_level": records.level,
        "periods": ", ".join(periods), "data_sha256": records.data_sha256,
        "source": MetadataValue.path(str(processed)),
    })


landed_logs_job = define_asset_job("landed_logs_job", selection=[landed_records],
                                   description="Register one landed log as a partition of landed_records.")


@sensor(job=landed_logs_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Watches the landing folder; each new CSV or Parquet log becomes a partition and a run.")
def landing_sensor(context, lake: LakeResource):
    known = set(context.instance.get_dynamic_partitions(landed_logs.name))
    new = [partition_key(p) for p in landed_files(lake.landing_dir()) if partition_key(p) not in known]
    if not new:
        return SensorResult(skip_reason="no new landed logs")
    return SensorResult(
        run_requests=[RunRequest(partition_key=k, run_key=k) for k in new],
        dynamic_partitions_requests=[landed_logs.build_add_request(new)],
    )
