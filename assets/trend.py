"""trend: the authority gap over time, re-evaluated on every landed log to date and per period."""

from __future__ import annotations

from dagster import DefaultScheduleStatus, MaterializeResult, MetadataValue, ScheduleDefinition, asset, define_asset_job

from assets.common import RECURRING, query, write_table
from assets.landing import landed_records
from autheval.estimators import DEFAULT_REPS, estimate
from autheval.records import records_from_table, table_sha256
from autheval.report import trend_plot_png
from autheval.study import estimates_table
from dagster_project.resources import LakeResource
from warehouse.atomic import atomic_write_bytes
from warehouse.sql import connect

ALL_PERIODS = "all"


@asset(group_name=RECURRING, kinds={"parquet"}, deps=[landed_records], description=(
    "period ('all' = every landed log to date, else YYYY-MM or batch), unit, metric, estimate and "
    "interval (generic evaluator scheme): follow the authority gap over time; plot reports/trend.png."))
def trend(lake: LakeResource):
    store = lake.lake()
    landed = store.read("landed_records")
    con = connect()
    con.register("landed_records", landed)
    periods = sorted(set(landed.column("period").to_pylist()))
    recordsets = []
    for period in [None, *periods]:
        table = query(con, "landed_all_to_date", {"period": period})
        label = ALL_PERIODS if period is None else period
        recordsets.append(records_from_table(table, f"lake:landed_records/{label}", label, table_sha256(table)))
    result = estimate(recordsets, scheme="evaluator", reps=DEFAULT_REPS)
    table = estimates_table(result)
    table = table.rename_columns(["period", *table.column_names[1:]])
    write_table(store, "trend", table)
    png = trend_plot_png(table)
    plot = atomic_write_bytes(store.root / "reports" / "trend.png", png)
    return MaterializeResult(metadata={"periods": ", ".join(periods), "rows": table.num_rows,
                                       "plot": MetadataValue.path(str(plot))})


recurring_evaluation_job = define_asset_job(
    "recurring_evaluation", selection=["trend", "catalog"],
    description="Re-evaluate every landed log to date and per period, then republish the catalog.")

recurring_evaluation_schedule = ScheduleDefinition(
    job=recurring_evaluation_job, cron_schedule="0 6 * * *", default_status=DefaultScheduleStatus.RUNNING,
    description="Daily at 06:00: the authority gap over time, with intervals, on all data to date.")
