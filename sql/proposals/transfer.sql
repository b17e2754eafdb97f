-- Does a mechanism's benchmark evidence describe the workflow? Per mechanism and review regime: its
-- benchmark accuracy over every item (with the whole-cluster interval) beside the authority-gap
-- estimates of that analysis, image-weighted (AuthEval's primary unit): J (the proposal's expected
-- local score), J_auth (the selected action's), p (intervention_rate) and Delta = J_auth - J with its
-- interval. Benchmark evidence describes the proposal; it describes the selected action only where
-- local review preserves the expected score, i.e. where Delta is 0: gap_excludes_zero says the
-- interval of Delta excludes 0 (the workflow then differs from what the benchmark saw).
-- A mechanism the benchmark could not score has a NULL accuracy and the benchmark's reason.
-- Input: estimates (lake table), benchmark (lake table). Output: one row per analysis.
WITH gaps AS (
    SELECT
        analysis,
        any_value(study) AS study,
        any_value(mechanism) AS mechanism,
        any_value(regime) AS regime,
        any_value(n) FILTER (WHERE metric = 'J') AS n_images,
        any_value(n_clusters) FILTER (WHERE metric = 'J') AS n_clusters,
        any_value(estimate) FILTER (WHERE metric = 'J') AS "J",
        any_value(ci_lower) FILTER (WHERE metric = 'J') AS "J_ci_lower",
        any_value(ci_upper) FILTER (WHERE metric = 'J') AS "J_ci_upper",
        any_value(estimate) FILTER (WHERE metric = 'J_auth') AS "J_auth",
        any_value(ci_lower) FILTER (WHERE metric = 'J_auth') AS "J_auth_ci_lower",
        any_value(ci_upper) FILTER (WHERE metric = 'J_auth') AS "J_auth_ci_upper",
        any_value(estimate) FILTER (WHERE metric = 'intervention_rate') AS intervention_rate,
        any_value(estimate) FILTER (WHERE metric = 'Delta_authority') AS "Delta_authority",
        any_value(ci_lower) FILTER (WHERE metric = 'Delta_authority') AS "Delta_authority_ci_lower",
        any_value(ci_upper) FILTER (WHERE metric = 'Delta_authority') AS "Delta_authority_ci_upper",
        any_value(data_sha256) AS estimates_sha256,
        any_value(rule_version) AS rule_version,
        any_value(rule_sha256) AS rule_sha256,
        min(analysis_order) AS analysis_order
    FROM estimates
    WHERE unit = 'image_weighted'
    GROUP BY analysis
),
evidence AS (
    SELECT mechanism, model, model_revision, n_items, n_clusters, accuracy, ci_lower, ci_upper, available, reason,
           data_sha256
    FROM benchmark
    WHERE scope = 'all'
)
SELECT
    g.study,
    g.analysis,
    g.analysis_order,
    g.mechanism,
    g.regime,
    e.model AS benchmark_model,
    coalesce(e.n_items, 0) AS benchmark_items,
    coalesce(e.n_clusters, 0) AS benchmark_clusters,
    e.accuracy AS benchmark_accuracy,
    e.ci_lower AS benchmark_ci_lower,
    e.ci_upper AS benchmark_ci_upper,
    coalesce(e.available, FALSE) AS benchmark_available,
    CASE WHEN e.mechanism IS NULL THEN 'no benchmark row for this mechanism' ELSE e.reason END AS benchmark_reason,
    g.n_images,
    g.n_clusters,
    g."J", g."J_ci_lower", g."J_ci_upper",
    g."J_auth", g."J_auth_ci_lower", g."J_auth_ci_upper",
    g.intervention_rate,
    g."Delta_authority", g."Delta_authority_ci_lower", g."Delta_authority_ci_upper",
    g."Delta_authority_ci_lower" > 0 OR g."Delta_authority_ci_upper" < 0 AS gap_excludes_zero,
    g.estimates_sha256,
    e.data_sha256 AS benchmark_sha256,
    g.rule_version,
    g.rule_sha256
FROM gaps AS g
LEFT JOIN evidence AS e ON e.mechanism = g.mechanism
ORDER BY g.study DESC, g.analysis_order, g.analysis
