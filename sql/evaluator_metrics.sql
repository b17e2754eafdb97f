-- The `evaluator` scheme's values in the replicate_metrics layout (rep = -1 is the point estimate):
-- image_weighted = (resampled) sum of values / (resampled) case count; cluster_equal = mean of the
-- (resampled) per-cluster means. Replicate r of every metric's own stream share a row.
-- Input: evaluator_sums(analysis, metric, rep, w_s, w_n, c_m, c_n): evaluator_point.sql (rep -1) and
-- the multiplicity products of every replicate. Portable SQL.
WITH long AS (
    SELECT analysis, rep, 'image_weighted' AS unit, metric, w_s / w_n AS value FROM evaluator_sums
    UNION ALL
    SELECT analysis, rep, 'cluster_equal', metric, c_m / c_n FROM evaluator_sums
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
