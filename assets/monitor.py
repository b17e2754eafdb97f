"""monitor and monitor_case_mix: every landed log to date, watched against the declared acceptance
protocol (autheval.monitoring.monitor): per site x model version x mechanism x rule and look, the estimate, its
anytime-valid confidence sequence beside the fixed-sample interval, and a status (alert | pass |
insufficient, with the reason); per site and period, the case mix against the site's baseline. The same
step appends the looks it decides first to the decision record, monitor_decisions
(autheval.monitoring.decisions), committed with the monitor table.

The asset check `monitor_has_no_alerts` fails (severity ERROR) naming every alert, so the UI shows it
red; `monitor_alert_sensor` sends each new alert once to the declared notifier (autheval.monitoring.notify keeps
the ids sent in the lake), reading the alerts in force in the committed table."""

from __future__ import annotations

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetSpec,
    DefaultSensorStatus,
    MetadataValue,
    SensorResult,
    multi_asset,
    sensor,
)

from assets.common import RECURRING, write_table
from assets.landing import landed_records
from assets.resources import LakeResource, NotifierResource, ProtocolResource
from assets.trend import trend
from autheval.monitoring.decisions import DECISIONS_TABLE, record_decisions
from autheval.monitoring.landing import empty_trend, landed_table_files, trend_plot_table
from autheval.monitoring.monitor import alerts, monitor_table
from autheval.monitoring.notify import Notified, notify_new
from autheval.reporting.report import trend_plot_png
from warehouse.atomic import atomic_write_bytes
from warehouse.lake import Lake

MONITOR, CASE_MIX, NO_ALERTS = "monitor", "monitor_case_mix", "monitor_has_no_alerts"


@multi_asset(
    specs=[
        AssetSpec(
            MONITOR,
            group_name=RECURRING,
            kinds={"parquet"},
            deps=[landed_records, trend],
            description=(
                "site, model_version, mechanism, metric, unit, period, look, n_clusters, estimate, cs_lower, "
                "cs_upper (anytime-valid confidence sequence), ci_lower, ci_upper (fixed-sample bootstrap), "
                "lower, upper, status (alert | pass | insufficient), reason, alpha, alpha_adjusted, "
                "protocol_version, protocol_sha256, data_sha256: every rule of the declared protocol, look by "
                "look, per site x model version (and pooled: 'all'); decided_status, decided_run, "
                "decided_snapshot: the look's first decision (monitor_decisions), and decision: how the status "
                "stands to it (decided_now, as_decided, superseded_by_later_data, superseded_by_protocol, "
                "recomputed). No landed data gives an empty table."
            ),
        ),
        AssetSpec(
            CASE_MIX,
            group_name=RECURRING,
            kinds={"parquet"},
            deps=[landed_records],
            description=(
                "site, period, look, dimension, category, count, baseline_share, share, bayes_factor, p_value "
                "(anytime-valid), shifted, reason: each site's case mix (risk strata, workflow profiles, record "
                "levels) against its baseline periods, by a sequential multinomial test."
            ),
        ),
    ],
    check_specs=[
        AssetCheckSpec(
            NO_ALERTS,
            asset=MONITOR,
            description=(
                "No site x model version x mechanism x rule alerts at its latest look: fails (ERROR) naming every "
                "alert (its confidence sequence lies wholly outside the protocol's bounds)."
            ),
        )
    ],
)
def monitor(context, lake: LakeResource, protocol: ProtocolResource):
    store = lake.lake()
    landed = landed_table_files(store)  # every landed log to date, read where it lies (superseded rows left out)
    declared = protocol.protocol()
    result = monitor_table(landed, declared, reps=protocol.bootstrap_reps)
    statuses = _count(result.table.column("status").to_pylist()) if result.table.num_rows else "none"
    # the decision record only grows: this run's first decisions are added, the earlier rows kept as made;
    # each look of the served table beside its first decision. Written by this step (one commit with the
    # monitor table), not an asset of its own: the record is kept whenever the monitor is recomputed.
    decided = _decided(context, store, result.table)
    if decided.record.num_rows or store.has_table(DECISIONS_TABLE):
        write_table(store, DECISIONS_TABLE, decided.record)
    yield write_table(
        store,
        MONITOR,
        decided.monitor,
        asset_key=MONITOR,
        protocol_version=declared.version,
        protocol_sha256=declared.sha256,
        protocol_file=declared.source,
        statuses=statuses,
        alerts=len(result.alerts),
        decisions=f"{DECISIONS_TABLE}: {decided.record.num_rows} rows, {decided.new_rows} decided in this run",
    )
    shifted = sum(bool(s) for s in result.case_mix.column("shifted").to_pylist()) if result.case_mix.num_rows else 0
    yield write_table(store, CASE_MIX, result.case_mix, asset_key=CASE_MIX, shifted_rows=shifted)
    if result.table.num_rows:  # reports/trend.png becomes one panel per site and rule (trend drew the periods)
        trend_rows = trend_plot_table(store.read("trend")) if store.has_table("trend") else empty_trend()
        atomic_write_bytes(store.publish_path("reports/trend.png"), trend_plot_png(trend_rows, result.table))
    yield alerts_check(result.alerts)


def _decided(context, store: Lake, table):
    """The decision record with this run's first decisions added (autheval.monitoring.decisions)."""
    lake_run = store.run()
    return record_decisions(
        store.read(DECISIONS_TABLE) if store.has_table(DECISIONS_TABLE) else None,
        table,
        lake_run.run_id if lake_run is not None else context.run_id,
        store.snapshot().snapshot,
    )


def _count(values: list[str]) -> str:
    return ", ".join(f"{value}: {values.count(value)}" for value in sorted(set(values)))


def alert_line(alert: dict) -> str:
    """One alert in words: where, which rule, the confidence sequence and the bounds, since when."""
    bounds = f"[{_bound(alert.get('lower'))}, {_bound(alert.get('upper'))}]"
    return (
        f"{alert.get('site')} / {alert.get('model_version')} / {alert.get('mechanism')}: {alert.get('metric')} "
        f"({alert.get('unit')}) confidence sequence [{_number(alert.get('cs_lower'))}, "
        f"{_number(alert.get('cs_upper'))}] outside {bounds} at {alert.get('period')}"
        + (f" (alerting since {alert['first_period']})" if alert.get("first_period") else "")
    )


def _bound(value) -> str:
    return "open" if value is None else f"{value:g}"


def _number(value) -> str:
    return "?" if value is None else f"{value:.4f}"


def alerts_check(alerts: list[dict]) -> AssetCheckResult:
    """monitor_has_no_alerts: passes with no alert; fails with severity ERROR, every alert named."""
    lines = [alert_line(alert) for alert in alerts]
    return AssetCheckResult(
        check_name=NO_ALERTS,
        asset_key=MONITOR,
        passed=not alerts,
        severity=AssetCheckSeverity.ERROR,
        description=(f"{len(alerts)} alert(s): " + "; ".join(lines)) if alerts else "no alerts",
        metadata={
            "alert_count": len(alerts),
            "alerts": MetadataValue.md("\n".join(f"* {line}" for line in lines) or "none"),
            "alert_ids": ", ".join(str(a.get("alert_id")) for a in alerts) or "none",
        },
    )


# --- notifications ------------------------------------------------------------------------------------


def notify_alerts(store: Lake, notifier: NotifierResource) -> Notified:
    """Send each alert in force in the lake's committed `monitor` table (autheval.monitoring.monitor.alerts)
    that this lake has not sent before (autheval.monitoring.notify.notify_new): the sensor's work, and `autheval
    monitor run`'s, wherever the job ran."""
    return notify_new(store.root, alerts(store.read(MONITOR)), notifier.send)


@sensor(
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Watches the committed monitor table (each materialization that commits, from the UI, the schedule or "
        "`autheval monitor run`): each new alert (a new alert_id) is sent once to the declared notifier "
        "(AUTHEVAL_NOTIFY_COMMAND or AUTHEVAL_NOTIFY_URL); the ids sent are kept in <lake>/monitor/notified.json, "
        "so none is sent twice, also after a restart. One that could not be sent is tried again next tick."
    ),
)
def monitor_alert_sensor(context, lake: LakeResource, notifier: NotifierResource):
    if not notifier.declared:
        return SensorResult(skip_reason="no notifier declared (AUTHEVAL_NOTIFY_COMMAND or AUTHEVAL_NOTIFY_URL)")
    store = lake.lake()
    files = store.table_files(MONITOR)
    if not files:
        return SensorResult(skip_reason="no monitor table committed yet")
    if context.cursor == files[0]:  # a committed table is a new file, never rewritten
        return SensorResult(skip_reason="no new monitor table since the last look")
    notified = notify_alerts(store, notifier)
    for alert_id, why in notified.failed:
        context.log.error(f"alert {alert_id} not sent: {why}")
    for alert_id in notified.sent:
        context.log.info(f"alert {alert_id} sent")
    # the cursor moves past this table once every alert of it is sent (else the next tick tries again)
    return SensorResult(
        skip_reason=f"{len(notified.sent)} alert(s) sent, {len(notified.before)} sent before, "
        f"{len(notified.failed)} not sent",
        cursor=context.cursor if notified.failed else files[0],
    )
