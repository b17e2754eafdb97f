"""`autheval monitor run`: one monitoring pass without the UI, for cron or any scheduler.

It lands every complete file waiting in <lake>/landing/ by the landing sensor's rules (autheval.monitoring.landing
.watch: a file is complete when two looks SETTLE_SECONDS apart see the same size and modification time;
temporary names are ignored; a duplicate of landed content is moved to duplicates/, a malformed file to
rejected/ with its reason), each as a partition of landed_records (the landing job, in-process), then
runs the recurring job (trend, monitor, monitor_case_mix, catalog) in-process and prints the monitor's
status (autheval.monitoring.monitor.status_report). When a notifier is declared, each new alert is sent once
(the alert sensor's rule, the same record in the lake). Runs go to an in-memory Dagster instance (the
demo's): the lake is the record, and the UI, when it runs, sees the committed tables."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from dagster import DagsterEventType, EnvVar, build_resources

from assets.landing import FILE_TAG, landed_logs, landed_logs_job
from assets.monitor import MONITOR, notify_alerts
from assets.resources import PROTOCOL_ENV, check_environment
from assets.trend import recurring_evaluation_job
from autheval import __version__
from autheval.monitoring.landing import Tick, watch
from autheval.monitoring.monitor import status_report
from autheval.monitoring.notify import check_notifier
from autheval.monitoring.protocol import load_protocol
from dagster_project.definitions import build_definitions, project_instance
from dagster_project.demo import QUIET
from warehouse.snapshots import LakeRun, new_run_id

SETTLE_SECONDS = 2.0  # between the two looks at the landing folder: a file still being written changes
EXIT_OK, EXIT_FAILED, EXIT_ALERT = 0, 1, 3


def monitor_run(
    lake: Path, protocol: Path | None = None, out: Callable[[str], None] = print, settle_seconds: float = SETTLE_SECONDS
) -> int:
    """Land what is waiting, run the recurring job, print the status. `protocol`: the acceptance
    protocol (default $AUTHEVAL_PROTOCOL, else the packaged one). Returns 0 (nothing alerts), 3
    (something alerts) or 1 (a run failed: a file that could not land for another reason than its
    content, or the recurring job). A bad protocol file raises ProtocolError before anything lands; a
    rejected file is reported on its line and set aside, and does not fail the run."""
    check_environment()  # every AUTHEVAL_* setting, one line naming a bad one, before anything lands
    protocol = protocol or EnvVar(PROTOCOL_ENV).get_value() or None  # as the protocol resource reads it
    load_protocol(protocol)  # bad input: one line, exit 2, nothing landed
    defs = build_definitions(str(lake), protocol=str(protocol) if protocol else None)
    instance = project_instance()
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
    try:
        return _pass(defs, instance, store, run, lake_resource.landing_dir(), notifier, out, settle_seconds)
    finally:
        run.close()


def _pass(defs, instance, store, run: LakeRun, landing: Path, notifier, out, settle_seconds: float) -> int:
    """One monitoring pass on a lake whose writer lock `run` holds (see monitor_run)."""
    first = watch(landing, store, None)
    _report(first, out)
    if first.waiting:
        time.sleep(settle_seconds)
    tick = watch(landing, store, first.cursor)
    _report(tick, out)
    for name in tick.waiting:
        out(f"waiting   {name}: still being written; it lands on a later run")
    failed = False
    for key, name, _ in tick.requests:
        landed = _land(defs, instance, key, name, out)
        if landed:
            run.commit()
        else:
            run.abort()
        failed |= not landed
    result = defs.resolve_job_def(recurring_evaluation_job.name).execute_in_process(
        instance=instance, run_config=QUIET, raise_on_error=False
    )
    if not result.success:
        run.abort()
        out(f"failed    the recurring job: {_failure(instance, result.run_id)}")
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


def _land(defs, instance, key: str, name: str, out: Callable[[str], None]) -> bool:
    """Land one file as partition `key` (the landing job, as the sensor's run would); False when it
    failed for another reason than its content (a rejected file is set aside and reported)."""
    instance.add_dynamic_partitions(landed_logs.name, [key])
    result = defs.resolve_job_def(landed_logs_job.name).execute_in_process(
        instance=instance, partition_key=key, tags={FILE_TAG: name}, run_config=QUIET, raise_on_error=False
    )
    if result.success:
        metadata = _materialized(instance, result.run_id)
        out(
            f"landed    {name}: partition {key}, {metadata.get('rows', '?')} rows, {metadata.get('clusters', '?')} "
            f"clusters, periods {metadata.get('periods', '?')} ({metadata.get('record_level', '?')})"
        )
        return True
    why = _failure(instance, result.run_id)
    if why.startswith(f"rejected {name}:"):
        out(f"rejected  {why[len('rejected ') :]}")
        return True
    out(f"failed    {name}: {why}")
    return False


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
