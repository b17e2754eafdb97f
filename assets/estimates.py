"""estimates and contrasts: the authority gap and its parts, both units, every analysis; the paired
contrast of mechanisms on identical clusters. The statistics are the SQL estimators (autheval.estimation.estimators)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    ResourceParam,
    asset_check,
    multi_asset,
    multi_asset_check,
)

from assets.common import ESTIMATES, check_result, check_row, table_specs, write_table
from assets.records import records
from assets.resources import DeclaredRules, EngineResource, LakeResource, SourceResource
from autheval.estimation.analytic import delta_method_rows, interval_table
from autheval.estimation.estimators import estimate
from autheval.estimation.multiplicity import flagged
from autheval.estimation.provenance import analysis_names, combined_sha256, run_provenance, stamp, with_names
from autheval.estimation.study import contrasts_table, estimates_table
from autheval.records.datasets import scan_parquet_files
from autheval.records.read import lake_analysis_records
from autheval.reference_data import PUBLISHED_CONTRAST, REFERENCE_ANALYSES, reference_path
from warehouse import sql
from warehouse.sql import connect

# The paired contrasts each study declares (arm_a minus arm_b).
STUDY_CONTRASTS = {"mechanisms": [PUBLISHED_CONTRAST]}


@multi_asset(
    specs=table_specs(
        ESTIMATES,
        [records, "declared_rules"],
        estimates=(
            "analysis, unit, metric, estimate, ci_lower, ci_upper, n, available, status, reason, scheme, "
            "reps, seed, record_level, data_sha256: J, J_auth, p, delta, Delta (+ J_std, Delta_total, "
            "Delta_utility where scored) per analysis, image-weighted and cluster-equal, with whole-"
            "cluster bootstrap intervals; unsupported numbers are reported as not recoverable."
        ),
        contrasts=(
            "contrast, unit, difference, ci_lower, ci_upper, excludes_zero: paired differences of the "
            "authority gap between mechanisms on identical clusters (one shared resampling stream); "
            "p_value, p_adjusted (Holm), q_value (Benjamini-Hochberg), family (every contrast of the "
            "study in one unit), family_size, excludes_zero_adjusted (the headline flag)."
        ),
        intervals=(
            "study, analysis, unit, metric, interval_method, estimate, std_error, ci_lower, ci_upper: the "
            "bootstrap intervals of `estimates` (bootstrap_reference) beside analytic delta-method "
            "intervals (linearisation over clusters, no replicates), the method named in every row."
        ),
    ),
)
def estimates(
    context, lake: LakeResource, source: SourceResource, engine: EngineResource, rules: ResourceParam[DeclaredRules]
):
    store = lake.lake()
    con = connect()
    files = lake_records_view(store, con)
    records = con.table("records")
    analyses = sql.run(con, "records/lake_records_analyses")  # one row per analysis: no record is held here
    studies = sorted(set(zip(analyses.column("study").to_pylist(), analyses.column("analysis").to_pylist())))
    mechanism = dict(zip(analyses.column("analysis").to_pylist(), analyses.column("mechanism").to_pylist()))
    estimate_parts, contrast_parts, interval_parts, order, hashes = [], [], [], {}, {}
    bootstrap = ("reference", None, source.reps)
    mechanism_order = _mechanism_order(store, source)
    with engine.engine() as compute:  # one engine (one Spark session) for every study
        for study in sorted({s for s, _ in studies}):
            recordsets = [lake_analysis_records(con, files, a, f"lake:records/{a}") for s, a in studies if s == study]
            if source.is_reference:
                recordsets.sort(key=_study_order)
                contrasts = STUDY_CONTRASTS.get(study, ())
            else:
                recordsets.sort(key=lambda r: mechanism_order.get(mechanism[r.analysis], len(mechanism_order)))
                contrasts = every_pair([r.analysis for r in recordsets])
            result = estimate(
                recordsets, scheme="reference", reps=source.reps, contrasts=contrasts, engine=compute, family=study
            )
            context.log.info(f"{study}: {len(recordsets)} analyses, {result.reps} replicates, scheme {result.scheme}")
            hashes.update({r.analysis: r.data_sha256 for r in recordsets})
            bootstrap = (result.scheme, result.seed, result.reps)
            part = estimates_table(result, model=mechanism)
            order.update({r.analysis: i for i, r in enumerate(recordsets)})
            part = part.add_column(0, "study", pa.array([study] * part.num_rows))
            estimate_parts.append(part)
            if result.contrasts:
                contrast_parts.append(contrasts_table(result))
            both = interval_table(result, delta_method_rows(recordsets, engine=compute))
            interval_parts.append(both.add_column(0, "study", pa.array([study] * both.num_rows)))
    table = pa.concat_tables(estimate_parts)
    contrast_table = pa.concat_tables(contrast_parts) if contrast_parts else contrasts_table(None)
    table = table.append_column(
        "analysis_order", pa.array([order[a] for a in table.column("analysis").to_pylist()], pa.int32())
    )
    scored_by = sql.run(con, "records/lake_records_rules") if "rule_sha256" in records.columns else analyses
    provenance, analysis_rules = run_provenance(scored_by, rules.rule_file(), engine.kind, *bootstrap)
    names = analysis_names(analyses)
    table = with_names(stamp(table.drop_columns(["model"]), provenance, hashes, rules=analysis_rules), names)
    contrast_table = stamp(
        contrast_table,
        provenance,
        {
            c: combined_sha256([hashes.get(a), hashes.get(b)])
            for c, a, b in zip(*(contrast_table.column(n).to_pylist() for n in ("contrast", "arm_a", "arm_b")))
        },
        key="contrast",
    )
    yield write_table(store, "estimates", table, asset_key="estimates")
    yield write_table(
        store,
        "contrasts",
        contrast_table,
        asset_key="contrasts",
        excluding_zero=flagged(contrast_table, adjusted=False),
        excluding_zero_adjusted=flagged(contrast_table),
    )
    intervals = pa.concat_tables(interval_parts, promote_options="permissive")
    yield write_table(
        store,
        "intervals",
        with_names(stamp(intervals, provenance, hashes, rules=analysis_rules), names),
        asset_key="intervals",
    )


def lake_records_view(store, con):
    """Create the view `records` on `con` over the lake's `records` table's Parquet files, read where
    they lie (nothing is read until a query runs), and return the files; FileNotFoundError when absent."""
    files = store.tables().get("records")
    if files is None:
        raise FileNotFoundError(f"no table 'records' in lake {store.root}")
    files = [files] if isinstance(files, str) else files
    scan_parquet_files(con, "records", files)
    return files


def every_pair(analyses: list[str]) -> list[tuple[str, str]]:
    """Every paired contrast within a study: each later analysis minus each earlier one, in the order
    the mechanisms were declared (first appearance in `proposals`)."""
    return [(later, earlier) for j, later in enumerate(analyses) for earlier in analyses[:j]]


def _mechanism_order(store, source: SourceResource) -> dict[str, int]:
    if source.is_reference:
        return {}
    names = store.read("proposals").column("mechanism").to_pylist()
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def _study_order(records) -> int:
    names = [a for a, *_ in REFERENCE_ANALYSES]
    return names.index(records.analysis) if records.analysis in names else len(names)


# The checks that guard the published numbers are blocking: a failure stops study_summary, report and catalog.
@asset_check(asset="estimates", blocking=True, description="Delta = p * delta for every analysis and unit (1e-12)")
def estimates_gap_identity(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "estimates/check_estimates_identity", ["estimates"])
    return AssetCheckResult(passed=row["max_residual"] <= 1e-12, metadata={k: float(v) for k, v in row.items()})


@asset_check(asset="estimates", blocking=True, description="the record level supports every reported number")
def estimates_supported_by_record_level(lake: LakeResource) -> AssetCheckResult:
    row = check_row(lake.lake(), "estimates/check_estimates_supported", ["estimates"])
    return check_result(row)


@multi_asset_check(
    specs=[
        AssetCheckSpec(
            "estimates_match_published_summary",
            asset="estimates",
            blocking=True,
            description=(
                "the mixed analysis equals the published AuthEval summary (1e-12); not run, so shown as "
                "skipped, when the lake has no reference analysis"
            ),
        )
    ],
    can_subset=True,
)
def estimates_match_published_summary(context, lake: LakeResource):
    if "mixed" not in set(lake.lake().read("estimates").column("analysis").to_pylist()):
        context.log.info("estimates_match_published_summary skipped: no reference analysis in this lake")
        return
    published = pq.read_table(reference_path("summary_mixed"))
    row = check_row(lake.lake(), "estimates/check_published_summary", ["estimates"], extra={"published": published})
    passed = row["metrics_compared"] == 6 and row["missing"] == 0 and row["max_abs_difference"] <= 1e-12
    yield AssetCheckResult(
        check_name="estimates_match_published_summary", passed=passed, metadata={k: float(v) for k, v in row.items()}
    )
