-- Test oracle (tests/test_engines.py): nothing in the project runs it; the in-process DuckDB checks
-- the identity with sql/estimates/identity_check.sql for every engine. Kept to show the step is portable too.
-- Delta = p * delta on the point estimate and on every replicate where delta is defined, per
-- analysis and unit, with the replicates that resampled no change: estimates/identity_check.sql in the
-- portable subset (conditional aggregates as CASE, not DuckDB's FILTER clause, which sqlglot does not
-- carry over to Spark). Input: replicate_metrics. Output: the layout of estimates/identity_check.sql.
SELECT
    analysis,
    unit,
    coalesce(max(CASE WHEN rep < 0 THEN abs("Delta_authority" - intervention_rate * delta) END),
             CAST(0 AS DOUBLE)) AS point_residual,
    coalesce(max(CASE WHEN rep >= 0 THEN abs("Delta_authority" - intervention_rate * delta) END),
             CAST(0 AS DOUBLE)) AS max_replicate_residual,
    CAST(sum(CASE WHEN rep >= 0 AND delta IS NULL THEN 1 ELSE 0 END) AS BIGINT) AS reps_without_change
FROM replicate_metrics
WHERE "Delta_authority" IS NOT NULL
GROUP BY analysis, unit
ORDER BY analysis, unit
