"""site_exports and heterogeneity: a hub lake lands signed site exports and pools them.

Each export folder waiting in <landing>/exports/ is verified against the lake's registered keys
(<lake>/trusted_keys/<site>.pub) and every export landed before (autheval.sites.lake); a refused one is
moved to <landing>/exports/rejected/ with its reason. When none lands and one was refused, the run fails
with the reasons and commits nothing: the lake keeps what it had. Otherwise the same step writes the
lake's estimates, intervals, contrasts (and, from monitor parts, monitor, monitor_case_mix and
monitor_decisions) as `autheval pool` of every landed export: those tables' asset keys are the records
path's, which a hub lake does not run, so they are written here, in one commit with site_exports."""

from __future__ import annotations

from dagster import AssetSpec, Failure, Field, MetadataValue, define_asset_job, multi_asset

from assets.common import RECURRING, write_table
from assets.resources import LakeResource, ProtocolResource
from autheval.monitoring.decisions import DECISIONS_TABLE
from autheval.sites.lake import (
    HETEROGENEITY,
    SITE_EXPORTS,
    discard,
    hub_tables,
    keep,
    lake_keys,
    land_exports,
    landed_exports,
    release,
    site_exports_table,
)

# the rule file the hub declares (`site land --rules`: its version and SHA-256): an export scored under other
# rules, or declaring none, is refused; left out, the sites must declare the same rules (or none)
HUB_RULES = {"rules_version": Field(str, is_required=False), "rules_sha256": Field(str, is_required=False)}


@multi_asset(
    specs=[
        AssetSpec(
            SITE_EXPORTS,
            group_name=RECURRING,
            kinds={"parquet"},
            description=(
                "site, export_key, manifest_sha256, signature, signed_by, signer, files, inputs, analyses, "
                "contrasts, monitor_protocol_sha256, scheme, seed, reps, export_software, landed_name, stored, "
                "landed_at: one row per signed site export landed in this hub lake (never a case or cluster id). "
                "The step also writes estimates, intervals, contrasts, monitor, monitor_case_mix and "
                "monitor_decisions as the pool of every landed export (a site column: 'all' or the site)."
            ),
        ),
        AssetSpec(
            HETEROGENEITY,
            group_name=RECURRING,
            kinds={"parquet"},
            deps=[SITE_EXPORTS],
            description=(
                "study, analysis, unit, metric, sites, cochran_q, df, i_squared, and provenance (data_sha256: the "
                "exports): Cochran's Q and I^2 of Delta_authority across the landed sites' delta-method "
                "estimates (inverse-variance weights)."
            ),
        ),
    ],
    config_schema=HUB_RULES,
)
def site_exports(context, lake: LakeResource, protocol: ProtocolResource):
    store = lake.lake()
    landing = lake.landing_dir()
    trusted = lake_keys(store.root)
    declared = protocol.protocol()
    given = context.op_execution_context.op_config or {}
    rules = None
    if "rules_sha256" in given:
        rules = {"version": given.get("rules_version"), "sha256": given["rules_sha256"]}
    before = landed_exports(store, trusted, landing)
    result = land_exports(landing, trusted, before, declared, rules)
    for line in result.refused:
        context.log.error(f"rejected {line}")
    if not result.landed and (result.refused or not before):
        if not result.refused:
            raise Failure(description=f"no export waits in {landing / 'exports'} and none has landed")
        # each refusal is one line of its own (`printable`); the list keeps a name holding " | " whole
        raise Failure(
            description="rejected " + " | ".join(result.refused),
            metadata={"refused": MetadataValue.json(result.refused)},
        )
    try:
        run = store.run()
        pooled = hub_tables(
            [*before, *(e for _, e, _ in result.landed)],
            declared,
            store.read(DECISIONS_TABLE) if store.has_table(DECISIONS_TABLE) else None,
            run.run_id if run is not None else context.run_id,
            store.snapshot().snapshot,
        )
        table = site_exports_table(store, landing, result.landed)
        for name, part in pooled.tables.items():
            if name != HETEROGENEITY:
                store.write(name, part)
        keep(landing, result.landed)  # the copies in place before their rows commit
    except BaseException:
        discard(result.landed)
        raise
    store.after_commit(lambda: release(landing, result.landed))
    landed = ", ".join(f"{e.site} ({name})" for _, e, name in result.landed) or "none"
    yield write_table(
        store,
        SITE_EXPORTS,
        table,
        asset_key=SITE_EXPORTS,
        landed=landed,
        refused=MetadataValue.json(result.refused),
        sites=", ".join(table.column("site").to_pylist()),
        tables=", ".join(sorted(pooled.tables)),
        alerts=len(pooled.alerts),
    )
    yield write_table(store, HETEROGENEITY, pooled.tables[HETEROGENEITY], asset_key=HETEROGENEITY)


site_exports_job = define_asset_job(
    "site_exports_job",
    selection=[SITE_EXPORTS, HETEROGENEITY, "catalog"],
    description="Land the signed site exports waiting in <landing>/exports/ and pool every landed export into the "
    "hub lake's tables, then commit.",
)
