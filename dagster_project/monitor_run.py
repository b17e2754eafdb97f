"""`autheval monitor run`: one monitoring pass without the UI, for cron or any scheduler.

It lands every complete file waiting in <lake>/landing/ by the landing sensor's rules (autheval.monitoring.landing
.watch: a file is complete when two looks SETTLE_SECONDS apart see the same size and modification time;
temporary names are ignored; a duplicate of landed content is moved to duplicates/, a malformed file to
rejected/ with its reason), each as a partition of landed_records (the landing job, in-process), then
runs the recurring job (trend, monitor, monitor_case_mix, catalog) in-process and prints the monitor's
status (autheval.monitoring.monitor.status_report). When a notifier is declared, each new alert is sent once
(the alert sensor's rule, the same record in the lake). Its Dagster runs (materializations, check
results) are recorded in the lake's instance (dagster_project.definitions.lake_instance: $DAGSTER_HOME, else
<lake>/.dagster_home), the one `autheval ui` serves, so the UI shows what a cron pass did.

Every pass is a run of the record: it rebuilds the lake's report (autheval.reporting.report.lake) and
writes its receipt, monitor/receipt.json (and monitor/receipts/<run>.json, kept), committed with its
last snapshot. The receipt's command line re-derives the recurring tables on an empty lake (`monitor
run --land FILE ... --lake DIR`: every landed file's processed copy, a correction after the file it
supersedes), so `autheval verify` of it re-runs that and compares landed_records, trend, monitor (less
the decision columns, which record the lake's history) and monitor_case_mix. The decision record
(monitor_decisions) is history, not a function of the files, and is not in the receipt."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from dagster import DagsterEventType, EnvVar, build_resources

from assets.landing import FILE_TAG, landed_logs, landed_logs_job
from assets.monitor import MONITOR, notify_alerts
from assets.resources import PROTOCOL_ENV, check_environment
from assets.trend import recurring_evaluation_job
from autheval import __version__
from autheval.errors import RecordError
from autheval.monitoring.decisions import without_history
from autheval.monitoring.landing import (
    LANDED_TABLE,
    Tick,
    already_handled,
    content_key,
    landed_sources,
    original_name,
    read_landed_table,
    set_aside,
    watch,
)
from autheval.monitoring.monitor import status_report
from autheval.monitoring.notify import check_notifier
from autheval.monitoring.protocol import load_protocol
from dagster_project.definitions import build_definitions, lake_instance
from dagster_project.demo import QUIET
from warehouse.filesystem import check_lake_folder, lake_location
from warehouse.snapshots import LakeRun, new_run_id

RECEIPT_PATH = "monitor/receipt.json"  # the latest pass's receipt; monitor/receipts/<run>.json keeps each
RECEIPT_TABLES = (LANDED_TABLE, "trend", "monitor", "monitor_case_mix")  # what the landed files determine
SETTLE_SECONDS = 2.0  # between the two looks at the landing folder: a file still being written changes
EXIT_OK, EXIT_FAILED, EXIT_ALERT = 0, 1, 3


def monitor_run(
    lake: Path,
    protocol: Path | None = None,
    out: Callable[[str], None] = print,
    settle_seconds: float = SETTLE_SECONDS,
    land: tuple[Path, ...] | list[Path] = (),
) -> int:
    """Land what is waiting, run the recurring job, print the status, rebuild the report and write the
    receipt. `protocol`: the acceptance protocol (default $AUTHEVAL_PROTOCOL, else the packaged one).
    `land`: files to land first, one by one in this order (copied into the landing folder under their
    original name; the receipt's re-derivation). Returns 0 (nothing alerts), 3 (something alerts) or 1 (a
    run failed: a file that could not land for another reason than its content, the recurring job, the
    report). A bad protocol file raises ProtocolError before anything lands; a rejected file is reported
    on its line and set aside, and does not fail the run."""
    check_environment()  # every AUTHEVAL_* setting, one line naming a bad one, before anything lands
    check_lake_folder(lake_location(lake))  # a folder the lake's databases cannot be opened in: one line
    for path in land:  # a real file, read here; never a link, a folder or a device
        if Path(path).is_symlink() or not Path(path).is_file():
            raise RecordError(str(path), None, "--land names a regular file (a landed log), not a link or a folder")
    protocol = protocol or EnvVar(PROTOCOL_ENV).get_value() or None  # as the protocol resource reads it
    load_protocol(protocol)  # bad input: one line, exit 2, nothing landed
    defs = build_definitions(str(lake), protocol=str(protocol) if protocol else None)
    with build_resources({"lake": defs.resources["lake"], "notifier": defs.resources["notifier"]}) as resources:
        lake_resource, notifier = resources.lake, resources.notifier
    check_notifier(notifier.command, notifier.url)  # a command or a URL, not both: one line, before anything lands
    lake_resource.check()  # the retention, the lock wait, the lake's pointer: one line each, before anything lands
    store = lake_resource.lake()
    # The whole pass holds the lake's writer lock (a second `monitor run`, a demo, a UI run is refused at
    # once in one line, or waits $AUTHEVAL_LAKE_WAIT): its Dagster runs join this lake run, and each
    # landed file, then the recurring job, commits as its own snapshot (or, failed, commits nothing).
    run = LakeRun(
        store.location, new_run_id("monitor"), store._legacy_tables, store.keep_snapshots, f"autheval {__version__}"
    ).open()
    landing = lake_resource.landing_dir()
    try:
        # the runs are recorded in the lake's instance, which the UI serves (opened under the lock, so two
        # passes never make its files at once; a bad dagster.yaml is one line before anything lands)
        with lake_instance(store) as instance:
            failed = _land_given(defs, instance, store, run, landing, [Path(p) for p in land], out)
            config = {"bootstrap_reps": defs.resources["protocol"].bootstrap_reps}

            def record() -> None:
                _record(store, run, landing, protocol, config)

            code = _pass(defs, instance, store, run, landing, notifier, out, settle_seconds, record)
            return EXIT_FAILED if failed else code
    finally:
        run.close()


def _land_given(defs, instance, store, run: LakeRun, landing: Path, files: list[Path], out) -> bool:
    """Land `files` one by one, in order (monitor_run's `land`); True when one failed."""
    failed = False
    for path in files:
        name = original_name(path)  # a processed copy <key>__<name> lands under the name it was dropped as
        landing.mkdir(parents=True, exist_ok=True)
        target = landing / name
        if target.exists() or target.is_symlink():
            raise RecordError(str(target), None, f"a waiting file has this name; --land {path} cannot be copied in")
        shutil.copyfile(path, target, follow_symlinks=False)
        from autheval.io import file_sha256

        key = content_key(file_sha256(target))
        reason = already_handled(landing, store, key)
        if reason:
            moved = set_aside(target, f"{name}: not landed again; {reason}", "duplicates")
            out(f"duplicate {name}: already landed; moved to {moved}")
            continue
        failed |= not _land(defs, instance, run, key, name, out)
    return failed


def _record(store, run: LakeRun, landing: Path, protocol, config: dict) -> None:
    """The pass as a run of the record: the lake's report rebuilt and the receipt written (staged: they
    commit with the recurring job's tables, as one snapshot)."""
    from autheval.reporting.receipt import build_receipt, input_entry, receipt_text, table_outputs
    from autheval.reporting.report.lake import write_report
    from warehouse.atomic import atomic_write_text

    write_report(store)
    sources = landed_sources(store, landing)
    argv = ["monitor", "run"]
    argv += ["--protocol", str(Path(protocol).resolve())] if protocol else []
    for path in sources:
        argv += ["--land", str(path)]
    argv += ["--lake", str(Path(store.root).resolve())]
    inputs = [input_entry("landed log", path) for path in sources]
    inputs += [input_entry("protocol", protocol)] if protocol else []
    tables = {name: store.read(name) for name in RECEIPT_TABLES if store.has_table(name)}
    if LANDED_TABLE in tables:  # every partition by column name (a column added later is null before)
        tables[LANDED_TABLE] = read_landed_table(store)
    if "monitor" in tables:
        tables["monitor"] = without_history(tables["monitor"])
    text = receipt_text(build_receipt("monitor", argv, inputs, table_outputs(tables, store.root), config))
    atomic_write_text(store.publish_path(RECEIPT_PATH), text)
    atomic_write_text(store.publish_path(f"monitor/receipts/{run.run_id}.json"), text)


def _pass(
    defs, instance, store, run: LakeRun, landing: Path, notifier, out, settle_seconds: float, record=lambda: None
) -> int:
    """One monitoring pass on a lake whose writer lock `run` holds (see monitor_run); `record` stages the
    report and the receipt, which commit with the recurring job's tables."""
    first = watch(landing, store, None)
    _report(first, out)
    if first.waiting:
        time.sleep(settle_seconds)
    tick = watch(landing, store, first.cursor)
    _report(tick, out)
    for name in tick.waiting:
        out(f"waiting   {name}: still being written; it lands on a later run")
    failed = bool(tick.failed)  # a file not handled (a linked record folder, an unreadable file): exit 1
    for key, name, _ in tick.requests:
        failed |= not _land(defs, instance, run, key, name, out)
    result = defs.resolve_job_def(recurring_evaluation_job.name).execute_in_process(
        instance=instance, run_config=QUIET, raise_on_error=False
    )
    if not result.success:
        run.abort()
        out(f"failed    the recurring job: {_failure(instance, result.run_id)}")
        return EXIT_FAILED
    try:
        record()
    except (OSError, ValueError, KeyError, RecordError) as err:  # the pass commits whole or not at all
        run.abort()
        out(f"failed    the report and receipt: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
        return EXIT_FAILED
    run.commit()
    lines, code = status_report(store.read(MONITOR))
    for line in lines:
        out(line)
    if notifier.declared:
        notified = notify_alerts(store, notifier)
        for alert_id in notified.sent:
            out(f"notified  alert {alert_id}")
        for alert_id, why in notified.failed:
            out(f"not sent  alert {alert_id}: {why}")
    return EXIT_FAILED if failed else code


def _report(tick: Tick, out: Callable[[str], None]) -> None:
    for moved in tick.duplicates:
        out(f"duplicate {moved.name.split('__', 1)[-1]}: already landed; moved to {moved}")
    for moved in tick.rejected:
        out(f"rejected  {moved.name.split('__', 1)[-1]}: moved to {moved}")
    for line in tick.failed:
        out(f"skipped   {line}")


def _land(defs, instance, run: LakeRun, key: str, name: str, out: Callable[[str], None]) -> bool:
    """Land one file as partition `key` (the landing job, as the sensor's run would) and commit it as
    its own snapshot; False, committing nothing, when it failed for another reason than its content.
    Its line (`landed`, `rejected`) is said after the commit, never for a file a killed run did not commit."""
    landed, said = _land_run(defs, instance, key, name, out)
    if landed:
        run.commit()
        out(said)
    else:
        run.abort()
    return landed


def _land_run(defs, instance, key: str, name: str, out: Callable[[str], None]) -> tuple[bool, str]:
    """The landing job's run for one file: (True, the line to say once committed), or (False, "") when
    it failed for another reason than its content (said at once)."""
    instance.add_dynamic_partitions(landed_logs.name, [key])
    result = defs.resolve_job_def(landed_logs_job.name).execute_in_process(
        instance=instance, partition_key=key, tags={FILE_TAG: name}, run_config=QUIET, raise_on_error=False
    )
    if result.success:
        metadata = _materialized(instance, result.run_id)
        return True, (
            f"landed    {name}: partition {key}, {metadata.get('rows', '?')} rows, {metadata.get('clusters', '?')} "
            f"clusters, periods {metadata.get('periods', '?')} ({metadata.get('record_level', '?')})"
        )
    why = _failure(instance, result.run_id)
    if why.startswith(f"rejected {name}:"):
        return True, f"rejected  {why[len('rejected ') :]}"
    out(f"failed    {name}: {why}")
    return False, ""


def _records(instance, run_id: str, kind: DagsterEventType) -> list:
    return [r.event_log_entry.dagster_event for r in instance.get_records_for_run(run_id, of_type=kind).records]


def _materialized(instance, run_id: str) -> dict:
    """The landed partition's metadata (rows, clusters, periods, record level) as plain values."""
    for event in _records(instance, run_id, DagsterEventType.ASSET_MATERIALIZATION):
        return {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}
    return {}


def _failure(instance, run_id: str) -> str:
    """The first line of why a run failed (its failed step's error, else the run's)."""
    for kind in (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE):
        for event in _records(instance, run_id, kind):
            error = getattr(event.event_specific_data, "error", None)
            while error is not None and error.cls_name.startswith("Dagster") and error.cause:
                error = error.cause  # the user code's own error (a resource's too), not Dagster's wrapper
            message = (error.message if error is not None else event.message) or ""
            lines = [line for line in message.strip().splitlines() if line.strip()]
            if lines:  # Dagster writes "module.Class: message"; the message is the line
                prefix = re.match(rf"^(?:\w+\.)*{re.escape(error.cls_name)}: ", lines[0]) if error is not None else None
                return lines[0][prefix.end() :] if prefix else lines[0]
    return f"run {run_id} failed"
