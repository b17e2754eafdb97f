"""`autheval protocol show|check FILE` (the declared acceptance protocol of a monitored deployment) and
`autheval monitor status|run|ack --lake DIR` (its current state; one recurring run from cron or any
scheduler; what was done about an alert, recorded in the lake). docs/monitoring.md explains the tables
and the statuses.

autheval/cli/main.py calls register(subparsers); its RecordError handler turns ProtocolError and a lake
without a monitor table into one line and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.cli.flags import add_command, add_lake_flag, add_show_check, path_flag

MONITOR_TABLE = "monitor"


def cmd_protocol_show(args) -> int:
    from autheval.monitoring.protocol import default_protocol_text

    sys.stdout.write(default_protocol_text())
    return 0


def cmd_protocol_check(args) -> int:
    from autheval.monitoring.protocol import load_protocol

    protocol = load_protocol(args.file)
    rules = ", ".join(f"{r.metric} ({r.unit})" for r in protocol.rules)
    print(
        f"{args.file}: ok: version {protocol.version}, sha256 {protocol.sha256}, alpha {protocol.alpha:g} "
        f"({protocol.multiplicity}), horizon {protocol.horizon_clusters} clusters, min {protocol.min_clusters} "
        f"clusters, {len(protocol.rules)} rules ({rules}), {len(protocol.sites)} site overrides"
    )
    return 0


def read_monitor(lake: Path):
    """The served lake's monitor table; a folder that is no lake, or a lake without the table, is one
    line (RecordError, exit 2)."""
    from autheval.errors import RecordError
    from warehouse.lake import Lake

    if not Path(lake).is_dir():
        raise RecordError(str(lake), None, "no such lake folder (--lake)")
    from warehouse.snapshots import SnapshotError

    store = Lake(lake)
    try:
        has = store.has_table(MONITOR_TABLE)
    except SnapshotError:
        raise  # the lake's own line (a lost or corrupt pointer, a link), as every command says it
    except (OSError, ValueError) as err:
        raise RecordError(str(lake), None, f"not a readable lake: {str(err).splitlines()[0]}") from None
    if not has:
        raise RecordError(
            str(lake),
            None,
            f"the lake has no {MONITOR_TABLE!r} table: run `autheval monitor run "
            f"--lake {lake}` (or the recurring job) first",
        )
    return store.read(MONITOR_TABLE)


def cmd_monitor_status(args) -> int:
    from autheval.monitoring.acknowledgements import alert_lines, read_acknowledgements
    from autheval.monitoring.monitor import status_report
    from warehouse.lake import Lake

    monitor = read_monitor(args.lake)
    lines, code = status_report(monitor)
    lines += alert_lines(monitor, read_acknowledgements(Lake(args.lake)), str(args.lake))
    for line in lines:
        print(line)
    return code


def cmd_monitor_ack(args) -> int:
    from autheval import __version__
    from autheval.monitoring.acknowledgements import check_request, record_acknowledgement
    from warehouse.lake import Lake

    check_request(args.alert, args.action, args.by, args.note)  # the flags first: one line, the lake untouched
    read_monitor(args.lake)  # no lake, or no monitor table: one line
    from autheval.reporting.report.lake import write_report

    row = record_acknowledgement(
        Lake(args.lake),
        args.alert,
        args.action,
        args.by,
        args.note,
        software=f"autheval {__version__}",
        staged=write_report,  # the report shows what was done as soon as it is recorded, in the same snapshot
    )
    print(
        f"recorded  {row['action']} of alert {row['alert_id']} ({row['site']} / {row['model_version']} / "
        f"{row['mechanism']}: {row['metric']} ({row['unit']}) since {row['first_period']}, look "
        f"{row['first_look']}) by {row['recorded_by']} at {row['recorded_at']}: snapshot {row['snapshot']}, "
        f"run {row['recorded_run']}"
    )
    return 0


def cmd_monitor_run(args) -> int:
    from autheval.monitoring.protocol import load_protocol

    if args.protocol is not None:
        load_protocol(args.protocol)  # a broken protocol is one line before anything runs
    from autheval.errors import RecordError
    from autheval.sites.lake import SITE_EXPORTS
    from warehouse.lake import Lake

    try:
        hub = Path(args.lake).is_dir() and Lake(args.lake).has_table(SITE_EXPORTS)
    except (OSError, ValueError):  # a broken lake: monitor_run says so in its own line
        hub = False
    if hub:  # its recurring job would replace the pooled monitor with one of no landed logs
        raise RecordError(str(args.lake), None, "a hub lake pools site exports: run `autheval site land` instead")
    from dagster_project.monitor_run import monitor_run

    return monitor_run(args.lake, args.protocol, land=args.land or ())


MONITOR_HELP = "watch a deployment: the state of every site x model version x rule, or one run"
MONITOR_DESCRIPTION = """\
Monitoring a deployment (docs/monitoring.md). `status` prints the latest look of every (site, model_version,
rule) from the lake's monitor table, then each alert in force with its id and what was done about it, and
exits 0 when nothing alerts, 3 when something does (2: bad input). `ack` records what was done about an
alert (acknowledged, reviewed; by whom, a note) as a row of the lake's append-only monitor_acknowledgements
table, committed as a snapshot of its own; the report lists it beside the alert.
`run` lands every complete file waiting in <lake>/landing/ and runs the recurring job (trend, monitor) in this
process, for cron or any scheduler, rebuilds the report and writes the pass's receipt (monitor/receipt.json,
which `autheval verify` re-derives); it exits 0, 3 when something alerts, 1 on failure."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `protocol show|check FILE` and `monitor status|run` to the `autheval` parser."""
    add_show_check(
        subparsers,
        "protocol",
        "the declared acceptance protocol of a monitored deployment (YAML)",
        "protocol file",
        "print the default protocol",
        cmd_protocol_show,
        cmd_protocol_check,
    )

    p = add_command(subparsers, "monitor", MONITOR_HELP, MONITOR_DESCRIPTION)
    sub = p.add_subparsers(dest="monitor_command", required=True)
    status = sub.add_parser("status", help="print the current state of every site x model version x rule")
    add_lake_flag(status)
    status.set_defaults(func=cmd_monitor_status)
    run = sub.add_parser("run", help="land waiting files and run the recurring job once, in this process")
    add_lake_flag(run)
    run.add_argument(
        "--protocol",
        type=path_flag,
        metavar="FILE",
        help="the acceptance protocol (default: the packaged one, `autheval protocol show`)",
    )
    run.add_argument(
        "--land",
        type=path_flag,
        action="append",
        metavar="FILE",
        help="land this log first, before what waits in the landing folder (repeatable, in order); a monitor "
        "receipt's command line re-derives the lake this way",
    )
    run.set_defaults(func=cmd_monitor_run)
    ack = sub.add_parser("ack", help="record what was done about an alert (append-only, in the lake)")
    add_lake_flag(ack)
    ack.add_argument("--alert", required=True, metavar="ID", help="the alert's id, as `monitor status` prints it")
    ack.add_argument("--by", required=True, metavar="NAME", help="who acted (a name or a role)")
    ack.add_argument(
        "--action", required=True, metavar="ACTION", help="acknowledged (seen, being looked at) or reviewed (decided)"
    )
    ack.add_argument("--note", required=True, metavar="TEXT", help="what was looked at and what was done (one line)")
    ack.set_defaults(func=cmd_monitor_ack)
