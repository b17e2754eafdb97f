-- Delta = p * delta, checked on the point estimate and on every replicate where delta is defined,
-- per analysis and unit; also counts the replicates with no change (delta undefined there).
-- Input: replicate_metrics.
WITH wide AS (
    SELECT
        analysis,
        unit,
        rep,
        any_value(value) FILTER (WHERE metric = 'Delta_authority') AS gap,
        any_value(value) FILTER (WHERE metric = 'intervention_rate') AS p,
        any_value(value) FILTER (WHERE metric = 'delta') AS d
    FROM replicate_metrics
    WHERE metric IN ('Delta_authority', 'intervention_rate', 'delta')
    GROUP BY analysis, unit, rep
)
SELECT
    analysis,
    unit,
    coalesce(max(abs(gap - p * d)) FILTER (WHERE rep < 0), 0.0) AS point_residual,
    coalesce(max(abs(gap - p * d)) FILTER (WHERE rep >= 0), 0.0) AS max_replicate_residual,
    count(*) FILTER (WHERE rep >= 0 AND d IS NULL) AS reps_without_change
FROM wide
WHERE gap IS NOT NULL
GROUP BY analysis, unit
ORDER BY analysis, unit
