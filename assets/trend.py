"""trend: the authority gap over time, re-evaluated on every landed log to date and per period."""

from __future__ import annotations

from dagster import DefaultScheduleStatus, MetadataValue, ScheduleDefinition, asset, define_asset_job

from assets.common import RECURRING, write_table
from assets.landing import landed_records
from autheval.estimators import DEFAULT_REPS, DEFAULT_SEEDS
from autheval.landing import LANDED_TABLE, TREND_SCHEME, trend_plot_table, trend_table
from autheval.provenance import Provenance, stamp
from autheval.report import trend_plot_png
from dagster_project.resources import LakeResource
from warehouse.atomic import atomic_write_bytes


@asset(group_name=RECURRING, kinds={"parquet"}, deps=[landed_records], description=(
    "period ('all' = every landed log to date, else YYYY-MM or batch), pool (the record level of the "
    "landed logs pooled, '+global' when they give the proposal's global score), unit, metric, estimate "
    "and interval (generic evaluator scheme): follow the authority gap over time; plot reports/trend.png. "
    "No landed data gives an empty table; a pool that cannot be evaluated gives rows saying why."))
def trend(context, lake: LakeResource):
    store = lake.lake()
    landed = store.read(LANDED_TABLE) if store.has_table(LANDED_TABLE) else None
    result = trend_table(landed, reps=DEFAULT_REPS)
    for reason in result.failed:
        context.log.warning(reason)
    table = stamp(result.table, Provenance(scheme=TREND_SCHEME, seed=DEFAULT_SEEDS[TREND_SCHEME], reps=DEFAULT_REPS))
    plot = atomic_write_bytes(store.publish_path("reports/trend.png"), trend_plot_png(trend_plot_table(result.table)))
    return write_table(store, "trend", table, periods=", ".join(result.periods),
                       pools=", ".join(result.pools), failed_pools=" | ".join(result.failed) or "none",
                       plot=MetadataValue.path(str(plot)))


recurring_evaluation_job = define_asset_job(
    "recurring_evaluation", selection=["trend", "catalog"],
    description="Re-evaluate every landed log to date and per period, then republish the catalog.")

recurring_evaluation_schedule = ScheduleDefinition(
    job=recurring_evaluation_job, cron_schedule="0 6 * * *", default_status=DefaultScheduleStatus.RUNNING,
    description="Daily at 06:00: the authority gap over time, with intervals, on all data to date.")
