-- Metric values per analysis, replicate (rep = -1 is the point estimate) and evaluation unit, from
-- the replicate-sum layout. image_weighted = ratio of (weighted) sums over images; cluster_equal =
-- (weighted) mean of per-cluster means. delta is the ratio of the gap to the intervention rate in both
-- units, so Delta = p * delta holds per replicate in both. NULL = undefined (no change resampled).
-- Input: replicate_sums. Portable SQL.
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
SELECT analysis, rep, unit, 'J' AS metric, ex / d AS value FROM units
UNION ALL SELECT analysis, rep, unit, 'intervention_rate', chg / d FROM units
UNION ALL SELECT analysis, rep, unit, 'J_auth', pr / d FROM units
UNION ALL SELECT analysis, rep, unit, 'Delta_authority', gap / d FROM units
UNION ALL SELECT analysis, rep, unit, 'delta', gap / NULLIF(chg, 0) FROM units
UNION ALL SELECT analysis, rep, unit, 'J_std', gl / d FROM units
UNION ALL SELECT analysis, rep, unit, 'Delta_total', tot / d FROM units
UNION ALL SELECT analysis, rep, unit, 'Delta_utility', utl / d FROM units
