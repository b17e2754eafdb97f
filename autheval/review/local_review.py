"""The simulated local review as declared rules, in SQL (AuthEval reference spec sections 3 and 4):

    images, clusters, s_gate + rules  -> contexts     (sql/ingest/image_profiles.sql, sql/context/contexts.sql)
    proposals x contexts x regimes    -> selections   (sql/review/review_bands.sql, sql/review/selections_cohort.sql)
    selections + contexts + images    -> scores       (sql/scoring/scored_selections.sql, sql/scoring/scores_cohort.sql)
    the same scored selections        -> records      (sql/review/review_records.sql, the AuthEval log layout)

Everything runs on one DuckDB connection (warehouse.sql.connect()). An asset calls `run_review(...)`
(Arrow tables in and out) or the stage functions in one line; `write_review(...)` streams the large
outputs to Parquet instead, in bounded memory (figures: docs/benchmarks.md, `benchmarks/review.py`).
`reference_checks()` checks the engine against the published traces with the same SQL. Every output row
names the rule file's version and SHA-256.
No Dagster imports here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from autheval.review.rules import RuleFile, load_rules
from autheval.vocabulary import ACTIONS, RISK_LEVELS
from warehouse.sql import load_sql, one, run, to_parquet, to_table

REGIMES = ("capacity_ceiling", "safety_floor", "mixed")
# What the study's own rules reproduce of the published traces (spec 3.4 and 5.5): U_z values on the
# rows of trace-identified clusters, and the controls' checkable selections under capacity.
PUBLISHED_UZ_ROWS = 16_020
PUBLISHED_CONTROL_ROWS = 3_170
CONTROL_MECHANISMS = ("LLaVA-Med head", "CLIP probe")  # the reference study's nearest-level slates
MISSING_METADATA_IMAGE = "ISIC_0014818_downsampled"  # spec 9.1: the traces need the missing-metadata rule


# ---------------------------------------------------------------------------------------------------
# The rules as small relations and bound parameters (no SQL is composed in Python)


def rule_tables(rule_file: RuleFile) -> dict[str, pa.Table]:
    """The rules as the lookup tables the review SQL joins (profiles, factor levels, strata) and one
    row of constants (version, SHA-256, the global utility's weights) for SQL that binds nothing."""
    rules = rule_file.rules
    level = {a: i for i, a in enumerate(ACTIONS)}
    profiles = [
        {
            "profile": name,
            "profile_index": i,
            "capacity": level[p.capacity],
            "floor_policy": p.floor_policy,
            "floor_shift": rules.floor.shift[p.floor_policy],
            "w_under": float(p.w_under),
            "w_over": float(p.w_over),
        }
        for i, (name, p) in enumerate(rules.profiles.items())
    ]
    factors = []
    for factor in ("sens", "burden", "aversion"):
        declared = getattr(rules.private_factors, factor)
        for i, lv in enumerate(declared.levels):
            factors.append(
                {
                    "factor": factor,
                    "level_index": i,
                    "level": lv.name,
                    "w_under": float(getattr(lv, "w_under", 1.0)),
                    "w_over": float(lv.w_over),
                }
            )
    burden = rules.overrides.patient_burden
    strata = [
        {
            "risk_level": r,
            "level": i,
            "severity": float(rules.severity[r]),
            "floor_base": rules.floor.base[r],
            "burden_keep_level": level[burden.if_band_has[r]],
            "empty_default_level": level[rules.empty_band_default[r]],
        }
        for i, r in enumerate(RISK_LEVELS)
    ]
    constants = {
        "rule_version": [rule_file.version],
        "rule_sha256": [rule_file.sha256],
        "global_w_under": [float(rules.global_utility.w_under)],
        "global_w_over": [float(rules.global_utility.w_over)],
    }
    return {
        "rule_profiles": pa.Table.from_pylist(profiles),
        "rule_factor_levels": pa.Table.from_pylist(factors),
        "rule_risk_levels": pa.Table.from_pylist(strata),
        "rule_constants": pa.table(constants),
    }


def rule_parameters(rule_file: RuleFile) -> dict[str, object]:
    """Every scalar the review SQL binds, by name (each SQL file takes the ones it names)."""
    rules = rule_file.rules
    level = {a: i for i, a in enumerate(ACTIONS)}
    factors = rules.private_factors
    t1, t2, t3 = rules.proxy_bins.thresholds
    return {
        "profiles": list(rules.profiles),
        "n_profiles": len(rules.profiles),
        "missing_rule": rules.profile_assignment.missing_age_and_site,
        "context_seed": str(rules.context_seed),
        "sens_namespace": factors.sens.namespace,
        "burden_namespace": factors.burden.namespace,
        "aversion_namespace": factors.aversion.namespace,
        "n_sens": len(factors.sens.levels),
        "n_burden": len(factors.burden.levels),
        "n_aversion": len(factors.aversion.levels),
        "threshold_1": float(t1),
        "threshold_2": float(t2),
        "threshold_3": float(t3),
        "max_level": len(ACTIONS) - 1,
        "refusal_level": rules.overrides.patient_refusal.level,
        "refusal_removes": level[rules.overrides.patient_refusal.removes],
        "burden_level": rules.overrides.patient_burden.level,
        "burden_removes": level[rules.overrides.patient_burden.removes],
        "global_w_under": float(rules.global_utility.w_under),
        "global_w_over": float(rules.global_utility.w_over),
        "rule_version": rule_file.version,
        "rule_sha256": rule_file.sha256,
    }


def register_rules(con, rule_file: RuleFile) -> dict[str, object]:
    """Register the rule tables on `con`; return the bound parameters."""
    for name, table in rule_tables(rule_file).items():
        con.register(name, table)
    return rule_parameters(rule_file)


def _register_regimes(con, regimes) -> None:
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes:
        raise ValueError(
            f"unknown review regime {unknown[0] if unknown else None!r}: expected some of {', '.join(REGIMES)}"
        )
    con.register("regimes", pa.table({"regime": pa.array(list(dict.fromkeys(regimes)), pa.string())}))


# ---------------------------------------------------------------------------------------------------
# The stages (each reads relations of the same name on `con` and creates its table)


def build_contexts(con, params: dict[str, object]) -> None:
    """`image_profiles` then `contexts`, from `images`, `clusters`, `s_gate` and the rule tables.
    A caller that already knows each image's profile registers `image_profiles` itself and calls
    to_table(con, "contexts", "contexts", params)."""
    to_table(con, "image_profiles", "ingest/image_profiles", params)
    to_table(con, "contexts", "context/contexts", params)


def build_selections(con, params: dict[str, object], regimes=REGIMES) -> None:
    """`review_bands` and `selections` from `contexts`, `proposals` and `clusters`."""
    _register_regimes(con, regimes)
    to_table(con, "review_bands", "review/review_bands", params)
    to_table(con, "selections", "review/selections_cohort", params)


def build_scores(con, params: dict[str, object], records: bool = True) -> None:
    """`scored_selections` (a view), then the tables `review_scores` and (unless `records` is False,
    as for the lake, whose `records` asset projects its own) `records`, from `selections`, `clusters`,
    `contexts` and `images`."""
    _scored_selections(con, params)
    to_table(con, "review_scores", "scoring/scores_cohort", params)
    if records:
        to_table(con, "records", "review/review_records", params)


def _scored_selections(con, params: dict[str, object]) -> None:
    """The selections joined with both actions' utilities, as a (lazy) view its projections read."""
    con.sql(load_sql("scoring/scored_selections")).create_view("scored_selections")


@dataclass(frozen=True)
class ReviewTables:
    """The review's outputs as Arrow tables, and the checks an asset reports."""

    contexts: pa.Table
    selections: pa.Table
    scores: pa.Table
    records: pa.Table
    checks: dict


def run_review(
    con, images, clusters, s_gate, proposals, rules: RuleFile | None = None, regimes=REGIMES
) -> ReviewTables:
    """contexts -> selections -> scores -> records for every (mechanism x regime), in one call.

    images(image_id, age, anatomic_site, risk_stratum), clusters(image_id, cluster_id),
    s_gate(image_id, s_gate), proposals(mechanism, image_id, slate, a_head, ...): Arrow tables (or
    anything DuckDB can register). `rules` defaults to the study's rule file.
    """
    rule_file = rules or load_rules()
    params = register_rules(con, rule_file)
    for name, table in (("images", images), ("clusters", clusters), ("s_gate", s_gate), ("proposals", proposals)):
        con.register(name, table)
    build_contexts(con, params)
    build_selections(con, params, regimes)
    build_scores(con, params)
    checks = {
        name.split("/")[1]: one(con, name)
        for name in ("context/check_contexts_complete", "review/check_selections_band")
    }
    fetch = {
        name: con.table(name).arrow().read_all() for name in ("contexts", "selections", "review_scores", "records")
    }
    return ReviewTables(fetch["contexts"], fetch["selections"], fetch["review_scores"], fetch["records"], checks)


def write_review(con, folder, rules: RuleFile | None = None, regimes=REGIMES) -> dict[str, object]:
    """The same stages for inputs too large to hold: `images`, `clusters`, `s_gate` and `proposals`
    registered on `con` (e.g. views over Parquet); the per-image and per-cluster tables stay in
    DuckDB, and contexts, selections and scores are each streamed to `<folder>/<name>.parquet` and read
    back by the next stage (as the lake's assets do), so memory stays bounded by DuckDB's limit;
    `records` (the AuthEval log layout of the scored selections) is left as a view for its writer.
    Returns the Parquet paths by table name."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    con.execute("SET preserve_insertion_order = false")  # row order is not part of these tables
    params = register_rules(con, rules or load_rules())
    build_contexts(con, params)
    _register_regimes(con, regimes)
    to_table(con, "review_bands", "review/review_bands", params)
    paths = {"contexts": folder / "contexts.parquet"}
    con.table("contexts").write_parquet(str(paths["contexts"]))
    for sql_name, view, name in (
        ("review/selections_cohort", "selections", "selections"),
        ("scoring/scores_cohort", "review_scores", "scores"),
    ):
        if name == "scores":
            _scored_selections(con, params)
        paths[name] = folder / f"{name}.parquet"
        to_parquet(con, sql_name, paths[name], params)
        con.read_parquet(str(paths[name])).create_view(view)
    con.sql(load_sql("review/review_records")).create_view("records")  # left for its writer
    return paths


def record_sets(records: pa.Table, source: str = "records"):
    """One validated RecordSet per analysis of a records table, for autheval.estimation.estimators.estimate."""
    import pyarrow.compute as pc

    from autheval.io import table_sha256
    from autheval.records.read import records_from_table

    out = []
    for analysis in sorted(set(records.column("analysis").to_pylist())):
        part = records.filter(pc.equal(records.column("analysis"), analysis))
        out.append(records_from_table(part, f"{source}[{analysis}]", analysis, table_sha256(part)))
    return out


# ---------------------------------------------------------------------------------------------------
# The reference study: the engine checked against the published traces (spec 3.4, 3.8, 5.5)


def register_reference_inputs(con) -> None:
    """The reference study on `con`: reference_traces, split_freeze, frozen_proposal_heads, images
    (sql/ingest/images_reference.sql: risk strata recovered from U_g; no age or site), clusters (the frozen split),
    s_gate (the test images, score unknown: the study's gate-proxy scores are not shipped) and
    proposals (the two control mechanisms' nearest-level slates from their frozen heads)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from autheval.reference_data import reference_path, register_reference

    register_reference(con)
    freeze = con.table("split_freeze").arrow().read_all()
    con.register("frozen_proposal_heads", pq.read_table(reference_path("frozen_proposal_heads")))
    to_table(con, "images", "ingest/images_reference")
    con.register("clusters", freeze.select(["image_id", "cluster_id", "split"]))
    test_ids = freeze.filter(pc.equal(freeze.column("split"), "test")).column("image_id")
    con.register("s_gate", pa.table({"image_id": test_ids, "s_gate": pa.nulls(len(test_ids), pa.float64())}))
    to_table(con, "proposals", "proposals/reference_control_proposals")


def _bin_scores(rule_file: RuleFile) -> pa.Table:
    """One gate score strictly inside each risk bin of the rules (midpoints between thresholds)."""
    t = list(rule_file.rules.proxy_bins.thresholds)
    edges = [min(0.0, t[0] - 1.0), *t, max(1.0, t[-1] + 1.0)]
    return pa.table(
        {
            "bin_level": list(range(len(RISK_LEVELS))),
            "s_gate": [(edges[i] + edges[i + 1]) / 2 for i in range(len(RISK_LEVELS))],
        }
    )


def reference_checks(rules: RuleFile | None = None, con=None) -> dict[str, dict]:
    """Check the rule engine against the published study; every value is a count (or an example).

    * `uz`: U_z of both published actions, bit for bit, on the rows of trace-identified clusters;
    * `control_selections`: the engine's selection = a_exec for both controls under capacity on every
      row it can decide without the unshipped gate scores;
    * `implied`: a (profile, bin) per cluster under which every control row is reproduced, the
      intervention counts of spec 3.8 that the engine then gives, and its records against the traces;
    * `profile_rule`: per declared missing-age-and-site rule, the clusters whose profile it reproduces
      when every reference image lacks age and site (the shipped files carry neither).
    """
    from warehouse.sql import connect

    rule_file = rules or load_rules()
    con = con or connect()
    params = register_rules(con, rule_file)
    register_reference_inputs(con)
    out: dict[str, dict] = {}

    # Private factors do not depend on the profile: take them from any contexts run.
    build_contexts(con, params)
    to_table(con, "reference_cluster_profiles", "context/reference_cluster_profiles", params)

    out["profile_rule"] = {}
    for option in ("missing_tokens", "nan_age_bin", "image_id"):
        to_table(con, "image_profiles", "ingest/image_profiles", {**params, "missing_rule": option})
        to_table(con, "contexts", "context/contexts", params)
        out["profile_rule"][option] = one(
            con, "context/reference_profile_agreement", {"diagnostic_image": MISSING_METADATA_IMAGE}
        )

    # Contexts with the traces' own profiles (the smallest fitting one where several fit).
    con.register("cluster_profiles", con.table("reference_cluster_profiles").arrow().read_all())
    to_table(con, "image_profiles", "ingest/image_profiles_from_clusters")
    to_table(con, "contexts", "context/contexts", params)
    to_table(con, "reference_trace_selections", "review/reference_trace_selections")
    con.register("selections", con.table("reference_trace_selections").arrow().read_all())
    _scored_selections(con, params)
    to_table(con, "reference_trace_scores", "scoring/scores_cohort", params)
    out["uz"] = one(con, "scoring/check_reference_uz")
    con.unregister("selections")

    build_selections(con, params, regimes=("capacity_ceiling",))
    out["control_selections"] = one(con, "review/check_reference_control_selections")

    # Implied contexts: run the engine under every uniform (profile, bin), keep per cluster the first
    # fitting profile and bin that reproduce all its control rows, then rerun with those.
    test_images = con.table("s_gate").arrow().read_all().column("image_id")
    bins = _bin_scores(rule_file)
    variants = []
    for profile in rule_file.rules.profiles:
        for bin_level, score in zip(bins.column("bin_level").to_pylist(), bins.column("s_gate").to_pylist()):
            n = len(test_images)
            con.register("image_profiles", pa.table({"image_id": test_images, "profile": pa.array([profile] * n)}))
            con.register("s_gate", pa.table({"image_id": test_images, "s_gate": pa.array([score] * n, pa.float64())}))
            to_table(con, "contexts", "context/contexts", params)
            build_selections(con, params, regimes=("capacity_ceiling",))
            part = con.table("selections").select("mechanism, image_id, cluster_id, a_sel").arrow().read_all()
            part = part.append_column("profile", pa.array([profile] * part.num_rows))
            variants.append(part.append_column("bin_level", pa.array([bin_level] * part.num_rows, pa.int64())))
            con.unregister("image_profiles")
            con.unregister("s_gate")
    con.register("variant_selections", pa.concat_tables(variants))
    to_table(con, "reference_implied_contexts", "context/reference_implied_contexts")
    con.register("cluster_profiles", con.table("reference_implied_contexts").arrow().read_all())
    con.register("bin_scores", bins)
    to_table(con, "image_profiles", "ingest/image_profiles_from_clusters")
    to_table(con, "s_gate", "context/reference_implied_s_gate")
    to_table(con, "contexts", "context/contexts", params)
    build_selections(con, params, regimes=("capacity_ceiling",))
    build_scores(con, params)
    implied = con.table("reference_implied_contexts").arrow().read_all()
    out["implied"] = {
        "clusters": implied.num_rows,
        "control_selections": one(con, "review/check_reference_control_selections"),
        "control_records": one(con, "review/check_reference_control_records"),
        "change_counts": {r["analysis"]: r for r in run(con, "review/review_change_counts").to_pylist()},
    }
    return out
