-- Twin: tests/sql/portable_identity_check.sql, a test oracle (this file runs for every engine, in process).
-- Delta = p * delta, checked on the point estimate and on every replicate where delta is defined,
-- per analysis and unit; also counts the replicates with no change (delta undefined there).
-- Input: replicate_metrics.
SELECT
    analysis,
    unit,
    coalesce(max(abs("Delta_authority" - intervention_rate * delta)) FILTER (WHERE rep < 0), 0.0)
        AS point_residual,
    coalesce(max(abs("Delta_authority" - intervention_rate * delta)) FILTER (WHERE rep >= 0), 0.0)
        AS max_replicate_residual,
    count(*) FILTER (WHERE rep >= 0 AND delta IS NULL) AS reps_without_change
FROM replicate_metrics
WHERE "Delta_authority" IS NOT NULL
GROUP BY analysis, unit
ORDER BY analysis, unit
