-- Test oracle (tests/test_engines.py): nothing in the project runs it; the in-process DuckDB takes
-- the contrasts with sql/estimates/paired_contrast.sql for every engine. Kept to show the step is portable too.
-- Paired contrasts "arm_a minus arm_b" of Delta_authority on identical clusters, per unit, in the
-- portable subset: estimates/paired_contrast.sql with its quantiles written out as in portable_intervals.sql
-- (exact type-7 quantiles by window functions and numpy's lerp), and its p_value. Input: replicate_metrics,
-- contrast_pairs(contrast, arm_a, arm_b); parameters $lower, $upper. Output: the layout of
-- estimates/paired_contrast.sql.
WITH paired AS (
    SELECT
        c.contrast,
        a.unit,
        a.rep,
        a."Delta_authority" - b."Delta_authority" AS difference
    FROM contrast_pairs AS c
    JOIN replicate_metrics AS a ON a.analysis = c.arm_a
    JOIN replicate_metrics AS b ON b.analysis = c.arm_b AND b.unit = a.unit AND b.rep = a.rep
),
ranked AS (
    SELECT
        contrast,
        unit,
        difference AS value,
        row_number() OVER (PARTITION BY contrast, unit ORDER BY difference) - 1 AS pos,
        count(*) OVER (PARTITION BY contrast, unit) AS n_valid
    FROM paired
    WHERE rep >= 0 AND difference IS NOT NULL AND NOT isnan(difference)
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
        contrast,
        unit,
        max(h_lower - floor(h_lower)) AS g_lower,
        max(h_upper - floor(h_upper)) AS g_upper,
        max(CASE WHEN pos = floor(h_lower) THEN value END) AS lower_a,
        max(CASE WHEN pos = least(floor(h_lower) + 1, n_valid - 1) THEN value END) AS lower_b,
        max(CASE WHEN pos = floor(h_upper) THEN value END) AS upper_a,
        max(CASE WHEN pos = least(floor(h_upper) + 1, n_valid - 1) THEN value END) AS upper_b
    FROM positioned
    GROUP BY contrast, unit
),
points AS (
    SELECT contrast, unit, max(difference) AS difference
    FROM paired
    WHERE rep < 0
    GROUP BY contrast, unit
),
tails AS (  -- the p-value's counts over the defined replicates
    SELECT
        contrast,
        unit,
        sum(CASE WHEN difference <= 0 THEN 1 ELSE 0 END) AS at_or_below,
        sum(CASE WHEN difference >= 0 THEN 1 ELSE 0 END) AS at_or_above,
        count(*) AS defined
    FROM paired
    WHERE rep >= 0 AND difference IS NOT NULL AND NOT isnan(difference)
    GROUP BY contrast, unit
)
SELECT
    p.contrast,
    p.unit,
    p.difference,
    CASE WHEN k.g_lower >= 0.5 THEN k.lower_b - (k.lower_b - k.lower_a) * (1 - k.g_lower)
         ELSE k.lower_a + (k.lower_b - k.lower_a) * k.g_lower END AS ci_lower,
    CASE WHEN k.g_upper >= 0.5 THEN k.upper_b - (k.upper_b - k.upper_a) * (1 - k.g_upper)
         ELSE k.upper_a + (k.upper_b - k.upper_a) * k.g_upper END AS ci_upper,
    least(CAST(1 AS DOUBLE), CAST(2 AS DOUBLE) * (1 + least(t.at_or_below, t.at_or_above))
          / CAST(t.defined + 1 AS DOUBLE)) AS p_value
FROM points AS p
LEFT JOIN picked AS k ON k.contrast = p.contrast AND k.unit = p.unit
LEFT JOIN tails AS t ON t.contrast = p.contrast AND t.unit = p.unit
