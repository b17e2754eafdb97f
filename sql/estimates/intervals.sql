-- Twin: tests/sql/portable_intervals.sql, a test oracle (this file runs for every engine, in process).
-- Point estimates and percentile intervals (linear interpolation, numpy's default "type 7") per
-- analysis, unit and metric. Undefined replicates (NULL or NaN) are dropped before the quantile, as
-- numpy's nanquantile does, and counted. p_value: the bootstrap p-value of "the metric is 0", twice the
-- smaller share of defined replicates at or below 0 and at or above 0, with the +1 of a Monte Carlo
-- p-value (never 0): min(1, 2 (1 + min(#{x* <= 0}, #{x* >= 0})) / (B + 1)), the p-value the
-- equal-tailed percentile interval inverts (the caller keeps it for the gap metrics only).
-- Input: replicate_metrics; parameters $lower, $upper.
-- DuckDB-only: quantile_cont (Spark's percentile_cont differs; see README).
WITH long AS (
    SELECT analysis, unit, rep, 'J' AS metric, "J" AS value FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'intervention_rate', intervention_rate FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'J_auth', "J_auth" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_authority', "Delta_authority" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'delta', delta FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'J_std', "J_std" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_total', "Delta_total" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_utility', "Delta_utility" FROM replicate_metrics
)
SELECT
    analysis,
    unit,
    metric,
    estimate,
    bounds[1] AS ci_lower,
    bounds[2] AS ci_upper,
    reps,
    reps_undefined,
    least(CAST(1 AS DOUBLE), CAST(2 AS DOUBLE) * (1 + least(at_or_below, at_or_above))
          / CAST(reps - reps_undefined + 1 AS DOUBLE)) AS p_value
FROM (
    SELECT
        analysis,
        unit,
        metric,
        any_value(value) FILTER (WHERE rep < 0) AS estimate,
        -- one sort gives both quantiles
        quantile_cont(value, [$lower, $upper])
            FILTER (WHERE rep >= 0 AND value IS NOT NULL AND NOT isnan(value)) AS bounds,
        count(*) FILTER (WHERE rep >= 0) AS reps,
        count(*) FILTER (WHERE rep >= 0 AND (value IS NULL OR isnan(value))) AS reps_undefined,
        count(*) FILTER (WHERE rep >= 0 AND NOT isnan(value) AND value <= 0) AS at_or_below,
        count(*) FILTER (WHERE rep >= 0 AND NOT isnan(value) AND value >= 0) AS at_or_above
    FROM long
    GROUP BY analysis, unit, metric
)
ORDER BY analysis, unit, metric
