"""What every asset does the same way: read lake tables onto a connection (SQL files run through
warehouse.sql's run/rows/one) and write the result."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import pyarrow as pa
from dagster import AssetCheckResult, AssetSpec, MaterializeResult, MetadataValue, TableColumn, TableSchema, asset

from assets.resources import DeclaredRules, LakeResource, ModelsResource, SourceResource
from autheval.reference_data import register_reference
from autheval.review.local_review import register_rules
from warehouse.lake import Lake
from warehouse.sql import connect, one, run

# Groups (stages of the flow) and kinds, so the lineage reads left to right.
INGEST, DUPLICATES, CONTEXT, PROPOSALS, REVIEW, SCORING, ESTIMATES, REPORTS, RECURRING = (
    "ingest",
    "duplicates",
    "context",
    "proposals",
    "review",
    "scoring",
    "estimates",
    "reports",
    "recurring",
)


PARQUET = frozenset({"parquet"})  # a lake table's kind, unless it names others too (KINDS of the model assets)


def table_spec(name: str, group: str, deps: list, description: str, kinds=PARQUET) -> AssetSpec:
    """One lake table of a multi-asset: a Parquet table of one stage (`group`) read from `deps`, declared
    the same way as every other (table_asset, table_specs)."""
    return AssetSpec(name, group_name=group, kinds=set(kinds), deps=deps, description=description)


def table_asset(group: str, deps: list, description: str, kinds=PARQUET, **options):
    """@asset for a lake table: a Parquet table of one stage (`group`) read from `deps`, with its
    description; `options` go to @asset as they are."""
    return asset(group_name=group, kinds=set(kinds), deps=deps, description=description, **options)


def table_specs(group: str, deps: list, **descriptions: str) -> list[AssetSpec]:
    """The outputs of a multi-asset whose tables all come from the same inputs: Parquet tables of one
    stage (`group`) with the same `deps`, declared once so the outputs cannot drift apart, each with its
    own description (keyword: the table's name)."""
    return [table_spec(name, group, deps, text) for name, text in descriptions.items()]


def connect_with(lake: Lake, tables: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the named lake tables registered as relations."""
    con = connect()
    for name in tables:
        con.register(name, lake.read(name))
    return con


def ruled_connection(lake: Lake, rules: DeclaredRules, tables: Iterable[str]):
    """(connection, bound rule parameters, rule file): the named lake tables and the declared local rules'
    tables registered on one connection, how the review stages (contexts, selections, scores) open."""
    rule_file = rules.rule_file()
    con = connect_with(lake, tables)
    return con, register_rules(con, rule_file), rule_file


def lake_query(lake: Lake, sql_name: str, tables: Iterable[str], params=None) -> pa.Table:
    """`sql/<sql_name>.sql` over the named lake tables: how an asset reads what it builds on."""
    return run(connect_with(lake, tables), sql_name, params)


def reference_table(lake: Lake, sql_name: str) -> pa.Table:
    """The reference study's rows of a table: the SQL file `sql_name` over its embedded published traces
    (autheval.reference_data.register_reference), how every asset with a reference-study branch reads
    them."""
    return run(register_reference(connect_with(lake)), sql_name)


def table_schema(table: pa.Table) -> TableSchema:
    """The Arrow schema as Dagster's TableSchema (column name and Arrow type)."""
    return TableSchema(columns=[TableColumn(f.name, str(f.type)) for f in table.schema])


def write_table(
    lake: Lake, name: str, table: pa.Table, metadata: dict | None = None, asset_key: str | None = None, **extra
) -> MaterializeResult:
    """Write `name` atomically and describe it: Dagster's standard `dagster/row_count` and
    `dagster/column_schema`, the file, plus any extra metadata (`asset_key` names the output of a
    multi-asset)."""
    path = lake.write(name, table, metadata=metadata)
    return MaterializeResult(
        asset_key=asset_key,
        metadata={
            "dagster/row_count": MetadataValue.int(table.num_rows),
            "dagster/column_schema": MetadataValue.table_schema(table_schema(table)),
            "path": MetadataValue.path(str(path)),
            **extra,
        },
    )


def model_not_run(models: ModelsResource, source: SourceResource) -> str | None:
    """Why the model mechanisms do not run here, or None when they do."""
    if source.is_reference:
        return "not run: the reference study's proposals are its published traces"
    if not models.enabled:
        return "not run: model mechanisms are disabled (ModelsResource.enabled, $AUTHEVAL_MODELS=1, or autheval demo)"
    return None


def open_model_asset(
    lake: LakeResource,
    source: SourceResource,
    models: ModelsResource,
    outputs: dict[str, pa.Schema],
    missing: str | None = None,
) -> tuple[Lake, list[MaterializeResult]]:
    """How every model asset opens (assets/model_proposals.py, assets/grpo.py), in one place so they all
    skip alike: its lake, and where it does not run here (model_not_run, or `missing`: why a part it
    needs is not configured) each of its `outputs` written as an empty table of its schema whose metadata
    says why, for the asset to return (or yield) and stop; an empty list where it runs. A multi-asset's
    outputs (more than one) are written under their asset keys."""
    store = lake.lake()
    reason = model_not_run(models, source) or missing
    if not reason:
        return store, []
    keyed = len(outputs) > 1
    return store, [
        write_table(
            store, name, schema.empty_table(), {"status": reason}, asset_key=name if keyed else None, status=reason
        )
        for name, schema in outputs.items()
    ]


def model_asset(schema: pa.Schema, deps: list, description: str, kinds, missing=None):
    """@asset for a model mechanism's one table (assets/model_proposals.py), named after the function and
    opened by open_model_asset: where it does not run here (model_not_run, or `missing(models)`: why a part
    it needs is not configured) its empty table of `schema` is written and returned; where it runs, the
    function is called as fn(context, store, source, models), `store` the Lake."""

    def decorate(fn):
        name = fn.__name__

        def model_table(context, lake: LakeResource, source: SourceResource, models: ModelsResource):
            reason = missing(models) if missing else None
            store, skipped = open_model_asset(lake, source, models, {name: schema}, reason)
            return skipped[0] if skipped else fn(context, store, source, models)

        # the asset is declared where `fn` is (dagster_project/table_index.py names the function); not
        # functools.wraps, whose __wrapped__ would give Dagster fn's parameters as the asset's resources
        model_table.__module__, model_table.__name__, model_table.__qualname__ = fn.__module__, name, fn.__qualname__
        return table_asset(PROPOSALS, deps, description, kinds=kinds, name=name)(model_table)

    return decorate


def write_ruled(lake: Lake, name: str, table: pa.Table, rule_file, **extra) -> MaterializeResult:
    """write_table for a table made under the declared local rules: the rule file's version and SHA-256
    in its Parquet metadata and in the asset's, the same way for every such table (contexts, scores)."""
    stamp = {"rule_version": rule_file.version, "rule_sha256": rule_file.sha256}
    return write_table(lake, name, table, stamp, **stamp, **extra)


def check_row(
    lake: Lake,
    sql_name: str,
    tables: Iterable[str],
    aliases: dict[str, str] | None = None,
    extra: dict[str, pa.Table] | None = None,
) -> dict:
    """A check SQL file's one row (warehouse.sql.one) over lake tables, optionally registered under
    other names, plus `extra` tables from outside the lake: the asset checks' reader, patched by name in
    tests."""
    con = connect_with(lake, tables)
    for alias, name in (aliases or {}).items():
        con.register(alias, lake.read(name))
    for name, table in (extra or {}).items():
        con.register(name, table)
    return one(con, sql_name)


def check_result(row: dict, check_name: str | None = None) -> AssetCheckResult:
    """An asset check's result from a check SQL file's one row: passed when it counted no
    `violations`, every field as metadata (as text). One reading of a check row for every asset check
    (`check_name` names it inside a multi-asset check)."""
    return AssetCheckResult(
        check_name=check_name, passed=row["violations"] == 0, metadata={k: str(v) for k, v in row.items()}
    )
