-- The `evaluator` scheme's replicate values in the replicate_metrics layout (rep >= 0; the point
-- estimates, rep -1, are estimates/replicates_point.sql's, the same for every scheme): image_weighted = the
-- resampled sum of values over the resampled case count; cluster_equal = sum m / sum k of
-- estimates/evaluator_clusters.sql (the mean of the resampled cluster means; delta: the resampled cluster-equal
-- Delta over the resampled cluster-equal p). Replicate r of every metric's own stream share a row.
-- Input: evaluator_sums(analysis, metric, rep, w_s, w_n, c_m, c_k): the multiplicity products of
-- every replicate, which come back from any engine; DuckDB-only (any_value ... FILTER), so it runs on
-- the in-process DuckDB.
WITH long AS (
    SELECT analysis, rep, 'image_weighted' AS unit, metric, w_s / NULLIF(w_n, 0) AS value FROM evaluator_sums
    UNION ALL
    SELECT analysis, rep, 'cluster_equal', metric, c_m / NULLIF(c_k, 0) FROM evaluator_sums
)
SELECT
    analysis,
    rep,
    unit,
    any_value(value) FILTER (WHERE metric = 'J') AS "J",
    any_value(value) FILTER (WHERE metric = 'intervention_rate') AS intervention_rate,
    any_value(value) FILTER (WHERE metric = 'J_auth') AS "J_auth",
    any_value(value) FILTER (WHERE metric = 'Delta_authority') AS "Delta_authority",
    any_value(value) FILTER (WHERE metric = 'delta') AS delta,
    any_value(value) FILTER (WHERE metric = 'J_std') AS "J_std",
    any_value(value) FILTER (WHERE metric = 'Delta_total') AS "Delta_total",
    any_value(value) FILTER (WHERE metric = 'Delta_utility') AS "Delta_utility"
FROM long
GROUP BY analysis, rep, unit
