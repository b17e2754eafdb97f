"""trend: the authority gap over time, re-evaluated on every landed log to date and per period."""

from __future__ import annotations

from dagster import (
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    MetadataValue,
    ScheduleDefinition,
    asset,
    define_asset_job,
)

from assets.common import RECURRING, write_table
from assets.landing import landed_records
from assets.resources import (
    DEFAULT_MONITOR_CRON,
    MONITOR_CRON_ENV,
    MONITOR_TZ_ENV,
    LakeResource,
    monitor_schedule_settings,
)
from autheval.estimation.estimators import DEFAULT_REPS, DEFAULT_SEEDS
from autheval.estimation.provenance import Provenance, stamp
from autheval.monitoring.landing import TREND_SCHEME, landed_table_files, trend_plot_table, trend_table
from autheval.reporting.report import trend_plot_png
from warehouse.atomic import atomic_write_bytes


@asset(
    group_name=RECURRING,
    kinds={"parquet"},
    deps=[landed_records],
    description=(
        "period ('all' = every landed log to date, else YYYY-MM or batch), pool (the record level of the "
        "landed logs pooled, '+global' when they give the proposal's global score), unit, metric, estimate "
        "and interval (generic evaluator scheme): follow the authority gap over time; plot reports/trend.png. "
        "No landed data gives an empty table; a pool that cannot be evaluated gives rows saying why."
    ),
)
def trend(context, lake: LakeResource):
    store = lake.lake()
    landed = landed_table_files(store)  # read where it lies; a superseded file is left out (its correction counts)
    result = trend_table(landed, reps=DEFAULT_REPS)
    for reason in result.failed:
        context.log.warning(reason)
    table = stamp(result.table, Provenance(scheme=TREND_SCHEME, seed=DEFAULT_SEEDS[TREND_SCHEME], reps=DEFAULT_REPS))
    plot = atomic_write_bytes(store.publish_path("reports/trend.png"), trend_plot_png(trend_plot_table(result.table)))
    return write_table(
        store,
        "trend",
        table,
        periods=", ".join(result.periods),
        pools=", ".join(result.pools),
        failed_pools=" | ".join(result.failed) or "none",
        plot=MetadataValue.path(str(plot)),
    )


RECURRING_ASSETS = ["trend", "monitor", "monitor_case_mix", "catalog"]  # the recurring job, in run order

recurring_evaluation_job = define_asset_job(
    "recurring_evaluation",
    selection=RECURRING_ASSETS,
    description="Re-evaluate every landed log to date and per period (trend), watch it against the declared "
    "protocol (monitor, monitor_case_mix), then commit and republish the catalog.",
)


def recurring_evaluation_schedule(cron: str | None = None, timezone: str | None = None) -> ScheduleDefinition:
    """The recurring job's schedule: `cron` and `timezone` as given, else $AUTHEVAL_MONITOR_CRON and
    $AUTHEVAL_MONITOR_TZ, else monthly (06:00 UTC on the 1st). A bad cron string is one line (ValueError)."""
    cron, timezone = monitor_schedule_settings(cron, timezone)
    try:
        return ScheduleDefinition(
            name="recurring_evaluation_schedule",
            job=recurring_evaluation_job,
            cron_schedule=cron,
            execution_timezone=timezone,
            default_status=DefaultScheduleStatus.RUNNING,
            description=f"At cron {cron!r} ({timezone}; ${MONITOR_CRON_ENV}, ${MONITOR_TZ_ENV}): the authority gap "
            "over time and the monitor's decisions, on all data landed to date.",
        )
    except DagsterInvalidDefinitionError:
        raise ValueError(
            f"monitor schedule cron {cron!r} (${MONITOR_CRON_ENV}): not a cron schedule; give five fields "
            f"(minute hour day-of-month month day-of-week), e.g. {DEFAULT_MONITOR_CRON!r} (monthly, 06:00 "
            "on the 1st) or '0 6 * * 1' (Mondays)"
        ) from None
