-- Metric values per analysis, replicate (rep = -1 is the point estimate) and evaluation unit, one
-- column per metric, from the replicate-sum layout. image_weighted = ratio of (weighted) sums over
-- images; cluster_equal = (weighted) mean of per-cluster means. delta is the gap over the
-- intervention rate in both units, so Delta = p * delta holds per replicate in both.
-- NULL = undefined (no change resampled). Input: replicate_sums. Portable SQL.
WITH units AS (
    SELECT analysis, rep, 'image_weighted' AS unit,
           w_n AS d, w_changed AS chg, w_exec AS ex, w_prop AS pr, w_gap AS gap,
           w_glob AS gl, w_total_gap AS tot, w_utility_gap AS utl
    FROM replicate_sums
    UNION ALL
    SELECT analysis, rep, 'cluster_equal',
           c_n, c_changed, c_exec, c_prop, c_gap, c_glob, c_total_gap, c_utility_gap
    FROM replicate_sums
)
SELECT
    analysis,
    rep,
    unit,
    ex / d AS "J",
    chg / d AS intervention_rate,
    pr / d AS "J_auth",
    gap / d AS "Delta_authority",
    gap / NULLIF(chg, 0) AS delta,
    gl / d AS "J_std",
    tot / d AS "Delta_total",
    utl / d AS "Delta_utility"
FROM units
