-- Test oracle (tests/test_engines.py): nothing in the project runs it; the in-process DuckDB takes
-- the quantiles with sql/estimates/intervals.sql for every engine. Kept to show the step is portable too.
-- Point estimates and percentile intervals in the portable subset: estimates/intervals.sql without DuckDB's
-- quantile_cont (Spark's percentile_cont is approximate, its quantile discrete). Quantiles are exact,
-- with numpy's default "linear" interpolation (Hyndman-Fan type 7) written out: the replicate values
-- ranked by a window function, h = (n - 1) q, the values at ranks floor(h) and floor(h) + 1 (the last
-- rank at most) and numpy's lerp (a + (b - a) g, or b - (b - a)(1 - g) when g >= 0.5). Undefined
-- replicates (NULL or NaN) are dropped first, as numpy's nanquantile does, and counted; p_value as in
-- estimates/intervals.sql. Input: replicate_metrics; parameters $lower, $upper. Output: the layout of estimates/intervals.sql.
WITH long AS (
    SELECT analysis, unit, rep, 'J' AS metric, "J" AS value FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'intervention_rate', intervention_rate FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'J_auth', "J_auth" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_authority', "Delta_authority" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'delta', delta FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'J_std', "J_std" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_total', "Delta_total" FROM replicate_metrics
    UNION ALL SELECT analysis, unit, rep, 'Delta_utility', "Delta_utility" FROM replicate_metrics
),
ranked AS (
    SELECT
        analysis,
        unit,
        metric,
        value,
        row_number() OVER (PARTITION BY analysis, unit, metric ORDER BY value) - 1 AS pos,
        count(*) OVER (PARTITION BY analysis, unit, metric) AS n_valid
    FROM long
    WHERE rep >= 0 AND value IS NOT NULL AND NOT isnan(value)
),
positioned AS (
    SELECT
        *,
        CAST(n_valid - 1 AS DOUBLE) * $lower AS h_lower,
        CAST(n_valid - 1 AS DOUBLE) * $upper AS h_upper
    FROM ranked
),
picked AS (
    SELECT
        analysis,
        unit,
        metric,
        max(h_lower - floor(h_lower)) AS g_lower,
        max(h_upper - floor(h_upper)) AS g_upper,
        max(CASE WHEN pos = floor(h_lower) THEN value END) AS lower_a,
        max(CASE WHEN pos = least(floor(h_lower) + 1, n_valid - 1) THEN value END) AS lower_b,
        max(CASE WHEN pos = floor(h_upper) THEN value END) AS upper_a,
        max(CASE WHEN pos = least(floor(h_upper) + 1, n_valid - 1) THEN value END) AS upper_b
    FROM positioned
    GROUP BY analysis, unit, metric
),
bounds AS (
    SELECT
        analysis,
        unit,
        metric,
        CASE WHEN g_lower >= 0.5 THEN lower_b - (lower_b - lower_a) * (1 - g_lower)
             ELSE lower_a + (lower_b - lower_a) * g_lower END AS ci_lower,
        CASE WHEN g_upper >= 0.5 THEN upper_b - (upper_b - upper_a) * (1 - g_upper)
             ELSE upper_a + (upper_b - upper_a) * g_upper END AS ci_upper
    FROM picked
),
counted AS (
    SELECT
        analysis,
        unit,
        metric,
        max(CASE WHEN rep < 0 THEN value END) AS estimate,
        CAST(sum(CASE WHEN rep >= 0 THEN 1 ELSE 0 END) AS BIGINT) AS reps,
        CAST(sum(CASE WHEN rep >= 0 AND (value IS NULL OR isnan(value)) THEN 1 ELSE 0 END) AS BIGINT)
            AS reps_undefined,
        sum(CASE WHEN rep >= 0 AND NOT isnan(value) AND value <= 0 THEN 1 ELSE 0 END) AS at_or_below,
        sum(CASE WHEN rep >= 0 AND NOT isnan(value) AND value >= 0 THEN 1 ELSE 0 END) AS at_or_above
    FROM long
    GROUP BY analysis, unit, metric
)
SELECT c.analysis, c.unit, c.metric, c.estimate, b.ci_lower, b.ci_upper, c.reps, c.reps_undefined,
       least(CAST(1 AS DOUBLE), CAST(2 AS DOUBLE) * (1 + least(c.at_or_below, c.at_or_above))
             / CAST(c.reps - c.reps_undefined + 1 AS DOUBLE)) AS p_value
FROM counted AS c
LEFT JOIN bounds AS b ON b.analysis = c.analysis AND b.unit = c.unit AND b.metric = c.metric
ORDER BY c.analysis, c.unit, c.metric
