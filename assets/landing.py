"""landed_records: role-separated logs dropped into the landing folder, one partition per distinct file.

A partition is keyed by the file's content (the start of its SHA-256), so each distinct file lands
exactly once whatever its name. The sensor asks for a run only once a file has looked the same (size,
modification time) on two ticks; files under temporary names (`.name`, `*.tmp`, `*.part`) are ignored
until renamed in. The run lands a private copy of the file (never the dropped file itself, never a
link's target). A file repeating (site, case_id) pairs already landed is refused unless it declares
the earlier file it corrects (a `supersedes` column; autheval.monitoring.landing). A malformed file
fails its own run with the one-line reason and its copy is moved to landing/rejected/<key>__<name>
(with a .reason.txt); the other partitions stay as they were. The core logic is
autheval.monitoring.landing."""

from __future__ import annotations

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    Failure,
    MaterializeResult,
    RunRequest,
    RunsFilter,
    SensorResult,
    asset,
    define_asset_job,
    sensor,
)
from dagster._core.storage.tags import RUN_KEY_TAG

from assets.common import RECURRING
from assets.resources import LakeResource
from autheval.errors import RecordError
from autheval.monitoring.landing import (
    LANDED_TABLE,
    LandingChanged,
    check_landing,
    discard,
    locate,
    mark_processed,
    read_landed,
    set_aside,
    watch,
)

landed_logs = DynamicPartitionsDefinition(name="landed_logs")
FILE_TAG = "autheval/landed_file"  # the name the file was dropped under (a hint; the key is its content)


@asset(
    group_name=RECURRING,
    kinds={"parquet"},
    partitions_def=landed_logs,
    description=(
        "One landed role-separated log per partition, keyed by the file's content (SHA-256 prefix): AuthEval "
        "log schema + timestamp or batch, validated, with its reporting period, the name it was dropped "
        "under (landed_file) and its record level; lake table landed_records/<key>.parquet."
    ),
)
def landed_records(context, lake: LakeResource):
    key = context.partition_key
    try:
        found = locate(lake.landing_dir(), key, context.run.tags.get(FILE_TAG))  # a private copy
    except FileNotFoundError as err:  # moved or rewritten since the sensor looked
        raise Failure(description=str(err)) from err
    store = lake.lake()
    landed = False
    try:
        records, table = read_landed(found.path, key, found.name, found.sha256, source=found.label)
        check_landing(store, table, found.label)  # a case landed twice is refused unless a correction says so
        store.write_partition(
            LANDED_TABLE,
            key,
            table,
            {"source": found.label, "landed_file": found.name, "data_sha256": records.data_sha256},
        )
        # the copy moves to processed/ only once the partition is committed, and the commit is this
        # step's (a failed commit fails the run): a file that did not land stays where it was dropped
        store.after_commit(lambda: mark_processed(found))
        lake.commit()
        landed = True
    except LandingChanged as err:
        raise Failure(description=str(err)) from err
    except RecordError as err:
        moved = set_aside(found, str(err))
        context.log.error(f"rejected {found.name}: {err} (moved to {moved})")
        raise Failure(description=f"rejected {found.name}: {err}", metadata={"moved_to": str(moved)}) from err
    finally:
        if not landed:
            discard(found)  # what is left of the copy after a failure; the dropped file stays
    periods = sorted(set(table.column("period").to_pylist()))
    return MaterializeResult(
        metadata={
            "landed_file": found.name,
            "rows": table.num_rows,
            "clusters": records.n_clusters,
            "record_level": records.level,
            "periods": ", ".join(periods),
            "data_sha256": records.data_sha256,
            "source": found.label,
            "supersedes": table.column("supersedes")[0].as_py() or "none",
        }
    )


landed_logs_job = define_asset_job(
    "landed_logs_job", selection=[landed_records], description="Land one log file as a partition of landed_records."
)


LANDING_ATTEMPTS = 3  # runs of one dropped file the sensor asks for when each fails (the lake busy, a full disk)


def _attempt_key(instance, run_key: str) -> str | None:
    """The run key to ask for: `run_key` (the file's content and signature), or, where every run of it
    failed while the file still waits (a run that failed on the lake's lock, a full disk), the next
    attempt's key: the daemon runs one request per key, so a failed landing would otherwise never be
    asked for again. None after LANDING_ATTEMPTS failed runs. A key with a run that did not fail (done,
    queued, running) is asked for as it is: the daemon skips it."""
    for attempt in range(LANDING_ATTEMPTS):
        key = run_key if attempt == 0 else f"{run_key}-attempt-{attempt + 1}"
        runs = instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: key}))
        if not runs or any(run.status != DagsterRunStatus.FAILURE for run in runs):
            return key
    return None


@sensor(
    job=landed_logs_job,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Watches the landing folder; each new, complete CSV or Parquet log (unchanged since the "
    "previous tick) becomes a partition keyed by its content, and a run.",
)
def landing_sensor(context, lake: LakeResource):
    tick = watch(lake.landing_dir(), lake.lake(), context.cursor)
    for moved in tick.duplicates:
        context.log.info(f"duplicate set aside: {moved}")
    for moved in tick.rejected:
        context.log.warning(f"rejected: {moved}")
    for line in tick.failed:  # one file's trouble; the others landed all the same
        context.log.error(line)
    if not tick.requests:
        waiting = f"; waiting for {', '.join(tick.waiting)} to stop changing" if tick.waiting else ""
        return SensorResult(skip_reason=f"no new complete landed logs{waiting}", cursor=tick.cursor)
    known = set(context.instance.get_dynamic_partitions(landed_logs.name))
    new = [key for key, _, _ in tick.requests if key not in known]
    requests = []
    for key, name, run_key in tick.requests:
        attempt = _attempt_key(context.instance, run_key)
        if attempt is None:
            context.log.error(
                f"{name}: its landing failed {LANDING_ATTEMPTS} times; it waits in the landing folder "
                "(see those runs; touch or drop the file again to try once more)"
            )
            continue
        requests.append(RunRequest(partition_key=key, run_key=attempt, tags={FILE_TAG: name}))
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[landed_logs.build_add_request(new)] if new else [],
        cursor=tick.cursor,
    )
