-- Delta-method (linearisation over clusters) intervals of every ratio metric, both units, from the
-- per-cluster sums (cluster_stats) with no replicates: O(records) at any size, on any engine
-- (portable subset, sql/README.md).
-- Every metric is a ratio R = sum_c Y_c / sum_c X_c over the G clusters:
--   image_weighted: Y_c = the cluster's sum of the metric's values, X_c = its case count n_c
--                   (delta: Y_c = the cluster's sum of gaps, X_c = its number of changed cases);
--   cluster_equal:  Y_c = the cluster's mean, X_c = 1 (delta: Y_c = mean gap, X_c = share changed).
-- Its linearised variance over clusters, with the small-sample factor G / (G - 1):
--   Var(R) = G / (G - 1) * sum_c (Y_c - R X_c)^2 / (sum_c X_c)^2,
-- and the interval R + z * se with z the standard normal quantiles of the requested levels ($z_lower,
-- $z_upper, bound by the caller). The squared residuals are summed after R is known (a join of the
-- G cluster rows with one row per metric), not from raw moments, so no cancellation when the
-- residuals are small. NULL where undefined: one cluster (G - 1 = 0), no change (sum X = 0) or an
-- unscored column. Input: cluster_stats. Output: analysis, unit, metric, estimate, std_error,
-- ci_lower, ci_upper, n_clusters, interval_method ('delta_method').
WITH terms AS (
    SELECT analysis, 'image_weighted' AS unit, 'J' AS metric, sum_exec AS y, n AS x FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'intervention_rate', sum_changed, n FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'J_auth', sum_prop, n FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'Delta_authority', sum_gap, n FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'delta', sum_gap, sum_changed FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'J_std', sum_glob, n FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'Delta_total', sum_total_gap, n FROM cluster_stats
    UNION ALL SELECT analysis, 'image_weighted', 'Delta_utility', sum_utility_gap, n FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'J', sum_exec / n, CAST(1 AS DOUBLE) FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'intervention_rate', sum_changed / n, CAST(1 AS DOUBLE)
        FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'J_auth', sum_prop / n, CAST(1 AS DOUBLE) FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'Delta_authority', sum_gap / n, CAST(1 AS DOUBLE)
        FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'delta', sum_gap / n, sum_changed / n FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'J_std', sum_glob / n, CAST(1 AS DOUBLE) FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'Delta_total', sum_total_gap / n, CAST(1 AS DOUBLE)
        FROM cluster_stats
    UNION ALL SELECT analysis, 'cluster_equal', 'Delta_utility', sum_utility_gap / n, CAST(1 AS DOUBLE)
        FROM cluster_stats
),
ratios AS (
    SELECT
        analysis,
        unit,
        metric,
        sum(y) / NULLIF(sum(x), 0) AS estimate,
        sum(x) AS total_x,
        CAST(count(*) AS DOUBLE) AS clusters
    FROM terms
    GROUP BY analysis, unit, metric
),
residuals AS (
    SELECT
        t.analysis,
        t.unit,
        t.metric,
        sum((t.y - r.estimate * t.x) * (t.y - r.estimate * t.x)) AS sum_squares
    FROM terms AS t
    JOIN ratios AS r ON r.analysis = t.analysis AND r.unit = t.unit AND r.metric = t.metric
    GROUP BY t.analysis, t.unit, t.metric
),
errors AS (
    SELECT
        r.analysis,
        r.unit,
        r.metric,
        r.estimate,
        sqrt(r.clusters / NULLIF(r.clusters - 1, 0) * s.sum_squares) / NULLIF(abs(r.total_x), 0) AS std_error,
        CAST(r.clusters AS BIGINT) AS n_clusters
    FROM ratios AS r
    JOIN residuals AS s ON s.analysis = r.analysis AND s.unit = r.unit AND s.metric = r.metric
)
SELECT
    analysis,
    unit,
    metric,
    estimate,
    std_error,
    estimate + $z_lower * std_error AS ci_lower,
    estimate + $z_upper * std_error AS ci_upper,
    n_clusters,
    'delta_method' AS interval_method
FROM errors
ORDER BY analysis, unit, metric
