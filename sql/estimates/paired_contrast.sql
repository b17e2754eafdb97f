-- Twin: tests/sql/portable_paired_contrast.sql, a test oracle (this file runs for every engine, in process).
-- Paired contrasts "arm_a minus arm_b" of Delta_authority on identical clusters, per unit: the
-- difference of the point estimates and the percentile interval of the per-replicate differences
-- (both arms are resampled by the same replicates), and p_value, the bootstrap p-value of "no
-- difference" as estimates/intervals.sql defines it (twice the smaller tail share of the replicate differences
-- around 0, with the +1 of a Monte Carlo p-value). Input: replicate_metrics and
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
SELECT
    contrast,
    unit,
    difference,
    bounds[1] AS ci_lower,
    bounds[2] AS ci_upper,
    least(CAST(1 AS DOUBLE), CAST(2 AS DOUBLE) * (1 + least(at_or_below, at_or_above))
          / CAST(defined + 1 AS DOUBLE)) AS p_value
FROM (
    SELECT
        contrast,
        unit,
        any_value(difference) FILTER (WHERE rep < 0) AS difference,
        quantile_cont(difference, [$lower, $upper]) FILTER (WHERE rep >= 0 AND NOT isnan(difference))
            AS bounds,
        count(*) FILTER (WHERE rep >= 0 AND NOT isnan(difference)) AS defined,
        count(*) FILTER (WHERE rep >= 0 AND NOT isnan(difference) AND difference <= 0) AS at_or_below,
        count(*) FILTER (WHERE rep >= 0 AND NOT isnan(difference) AND difference >= 0) AS at_or_above
    FROM paired
    GROUP BY contrast, unit
)
