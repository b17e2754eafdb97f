-- Paired contrasts "arm_a minus arm_b" of Delta_authority on identical clusters, per unit: the
-- difference of the point estimates and the percentile interval of the per-replicate differences
-- (both arms are resampled by the same replicates). Input: replicate_metrics and
-- contrast_pairs(contrast, arm_a, arm_b); parameters $lower, $upper. DuckDB-only: quantile_cont.
WITH paired AS (
    SELECT
        c.contrast,
        a.unit,
        a.rep,
        a."Delta_authority" - b."Delta_authority" AS difference
    FROM contrast_pairs AS c
    JOIN replicate_metrics AS a ON a.analysis = c.arm_a
    JOIN replicate_metrics AS b ON b.analysis = c.arm_b AND b.unit = a.unit AND b.rep = a.rep
)
SELECT contrast, unit, difference, bounds[1] AS ci_lower, bounds[2] AS ci_upper
FROM (
    SELECT
        contrast,
        unit,
        any_value(difference) FILTER (WHERE rep < 0) AS difference,
        quantile_cont(difference, [$lower, $upper]) FILTER (WHERE rep >= 0 AND NOT isnan(difference))
            AS bounds
    FROM paired
    GROUP BY contrast, unit
)
