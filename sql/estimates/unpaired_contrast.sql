-- Unpaired contrasts "arm_a minus arm_b" of every metric, per unit (autheval/estimation/unpaired.py): each
-- arm's clusters are resampled on their own (independent streams, one per arm and stratum), so replicate r
-- of the difference is arm a's replicate r minus arm b's. An arm's value is the weighted sum of its strata's
-- metrics (weight 1 with one stratum); NULL where a stratum's metric is undefined in that replicate. The
-- percentile interval and the p-value as estimates/paired_contrast.sql gives them (twice the smaller tail
-- share around 0, with the +1 of a Monte Carlo p-value). Input: unpaired_replicates(arm, stratum, rep, unit,
-- metric, value; rep -1 = the point), unpaired_weights(contrast, unit, arm, stratum, weight),
-- unpaired_pairs(contrast, arm_a, arm_b); parameters $lower, $upper. DuckDB-only: quantile_cont, FILTER.
WITH arm_values AS (
    SELECT
        w.contrast,
        r.arm,
        r.unit,
        r.metric,
        r.rep,
        CASE WHEN count(r.value) = count(*) AND NOT bool_or(isnan(r.value)) THEN sum(w.weight * r.value) END
            AS value
    FROM unpaired_replicates AS r
    JOIN unpaired_weights AS w ON w.arm = r.arm AND w.stratum = r.stratum AND w.unit = r.unit
    GROUP BY w.contrast, r.arm, r.unit, r.metric, r.rep
),
differences AS (
    SELECT p.contrast, a.unit, a.metric, a.rep, a.value - b.value AS difference
    FROM unpaired_pairs AS p
    JOIN arm_values AS a ON a.contrast = p.contrast AND a.arm = p.arm_a
    JOIN arm_values AS b
        ON b.contrast = p.contrast AND b.arm = p.arm_b AND b.unit = a.unit AND b.metric = a.metric AND b.rep = a.rep
)
SELECT
    contrast,
    unit,
    metric,
    difference,
    bounds[1] AS ci_lower,
    bounds[2] AS ci_upper,
    CASE WHEN defined > 0 THEN
        least(CAST(1 AS DOUBLE), CAST(2 AS DOUBLE) * (1 + least(at_or_below, at_or_above)) / CAST(defined + 1 AS DOUBLE))
    END AS p_value,
    replicates - defined AS reps_undefined
FROM (
    SELECT
        contrast,
        unit,
        metric,
        any_value(difference) FILTER (WHERE rep < 0) AS difference,
        quantile_cont(difference, [$lower, $upper]) FILTER (WHERE rep >= 0 AND difference IS NOT NULL) AS bounds,
        count(*) FILTER (WHERE rep >= 0) AS replicates,
        count(*) FILTER (WHERE rep >= 0 AND difference IS NOT NULL) AS defined,
        count(*) FILTER (WHERE rep >= 0 AND difference <= 0) AS at_or_below,
        count(*) FILTER (WHERE rep >= 0 AND difference >= 0) AS at_or_above
    FROM differences
    GROUP BY contrast, unit, metric
)
ORDER BY contrast, unit, metric
