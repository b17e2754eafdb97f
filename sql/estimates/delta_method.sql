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
-- $z_upper, bound by the caller). Two passes over the G cluster rows, whatever the number of
-- metrics: one aggregate gives every ratio, and one join with that single row per analysis sums the
-- squared residuals (summed after R is known, not from raw moments: no cancellation when the
-- residuals are small). NULL where undefined: one cluster (G - 1 = 0), no change (sum X = 0) or an
-- unscored column. Input: cluster_stats. Output: analysis, unit, metric, estimate, std_error,
-- ci_lower, ci_upper, n_clusters, interval_method ('delta_method').
WITH ratios AS (  -- pass 1: every ratio, and the denominators' totals
    SELECT
        analysis,
        CAST(count(*) AS DOUBLE) AS clusters,
        sum(n) AS total_n,
        sum(sum_changed) AS total_changed,
        sum(sum_changed / n) AS total_share_changed,
        sum(sum_exec) / sum(n) AS iw_j,
        sum(sum_changed) / sum(n) AS iw_p,
        sum(sum_prop) / sum(n) AS iw_j_auth,
        sum(sum_gap) / sum(n) AS iw_gap,
        sum(sum_gap) / NULLIF(sum(sum_changed), 0) AS iw_delta,
        sum(sum_glob) / sum(n) AS iw_j_std,
        sum(sum_total_gap) / sum(n) AS iw_total_gap,
        sum(sum_utility_gap) / sum(n) AS iw_utility_gap,
        sum(sum_exec / n) / count(*) AS ce_j,
        sum(sum_changed / n) / count(*) AS ce_p,
        sum(sum_prop / n) / count(*) AS ce_j_auth,
        sum(sum_gap / n) / count(*) AS ce_gap,
        sum(sum_gap / n) / NULLIF(sum(sum_changed / n), 0) AS ce_delta,
        sum(sum_glob / n) / count(*) AS ce_j_std,
        sum(sum_total_gap / n) / count(*) AS ce_total_gap,
        sum(sum_utility_gap / n) / count(*) AS ce_utility_gap
    FROM cluster_stats
    GROUP BY analysis
),
residuals AS (  -- pass 2: the squared linearised residuals Y_c - R X_c, summed per analysis
    SELECT
        s.analysis,
        sum(power(s.sum_exec - r.iw_j * s.n, 2)) AS ss_iw_j,
        sum(power(s.sum_changed - r.iw_p * s.n, 2)) AS ss_iw_p,
        sum(power(s.sum_prop - r.iw_j_auth * s.n, 2)) AS ss_iw_j_auth,
        sum(power(s.sum_gap - r.iw_gap * s.n, 2)) AS ss_iw_gap,
        sum(power(s.sum_gap - r.iw_delta * s.sum_changed, 2)) AS ss_iw_delta,
        sum(power(s.sum_glob - r.iw_j_std * s.n, 2)) AS ss_iw_j_std,
        sum(power(s.sum_total_gap - r.iw_total_gap * s.n, 2)) AS ss_iw_total_gap,
        sum(power(s.sum_utility_gap - r.iw_utility_gap * s.n, 2)) AS ss_iw_utility_gap,
        sum(power(s.sum_exec / s.n - r.ce_j, 2)) AS ss_ce_j,
        sum(power(s.sum_changed / s.n - r.ce_p, 2)) AS ss_ce_p,
        sum(power(s.sum_prop / s.n - r.ce_j_auth, 2)) AS ss_ce_j_auth,
        sum(power(s.sum_gap / s.n - r.ce_gap, 2)) AS ss_ce_gap,
        sum(power(s.sum_gap / s.n - r.ce_delta * (s.sum_changed / s.n), 2)) AS ss_ce_delta,
        sum(power(s.sum_glob / s.n - r.ce_j_std, 2)) AS ss_ce_j_std,
        sum(power(s.sum_total_gap / s.n - r.ce_total_gap, 2)) AS ss_ce_total_gap,
        sum(power(s.sum_utility_gap / s.n - r.ce_utility_gap, 2)) AS ss_ce_utility_gap
    FROM cluster_stats AS s
    JOIN ratios AS r ON r.analysis = s.analysis
    GROUP BY s.analysis
),
per_analysis AS (
    SELECT r.*, e.ss_iw_j, e.ss_iw_p, e.ss_iw_j_auth, e.ss_iw_gap, e.ss_iw_delta, e.ss_iw_j_std,
           e.ss_iw_total_gap, e.ss_iw_utility_gap, e.ss_ce_j, e.ss_ce_p, e.ss_ce_j_auth, e.ss_ce_gap,
           e.ss_ce_delta, e.ss_ce_j_std, e.ss_ce_total_gap, e.ss_ce_utility_gap,
           clusters / NULLIF(clusters - 1, 0) AS small_sample  -- G / (G - 1)
    FROM ratios AS r
    JOIN residuals AS e ON e.analysis = r.analysis
),
metric_names AS (  -- unit and metric of each output row (a cross join: per_analysis is computed once)
    SELECT * FROM (VALUES
        (0, 'image_weighted', 'J'),
        (1, 'image_weighted', 'intervention_rate'),
        (2, 'image_weighted', 'J_auth'),
        (3, 'image_weighted', 'Delta_authority'),
        (4, 'image_weighted', 'delta'),
        (5, 'image_weighted', 'J_std'),
        (6, 'image_weighted', 'Delta_total'),
        (7, 'image_weighted', 'Delta_utility'),
        (8, 'cluster_equal', 'J'),
        (9, 'cluster_equal', 'intervention_rate'),
        (10, 'cluster_equal', 'J_auth'),
        (11, 'cluster_equal', 'Delta_authority'),
        (12, 'cluster_equal', 'delta'),
        (13, 'cluster_equal', 'J_std'),
        (14, 'cluster_equal', 'Delta_total'),
        (15, 'cluster_equal', 'Delta_utility')
    ) AS names(k, unit, metric)
),
errors AS (  -- per unit and metric: the ratio and sqrt(G / (G - 1) * sum of squares) / |sum X|
    SELECT
        a.analysis,
        m.unit,
        m.metric,
        CASE m.k
            WHEN 0 THEN iw_j
            WHEN 1 THEN iw_p
            WHEN 2 THEN iw_j_auth
            WHEN 3 THEN iw_gap
            WHEN 4 THEN iw_delta
            WHEN 5 THEN iw_j_std
            WHEN 6 THEN iw_total_gap
            WHEN 7 THEN iw_utility_gap
            WHEN 8 THEN ce_j
            WHEN 9 THEN ce_p
            WHEN 10 THEN ce_j_auth
            WHEN 11 THEN ce_gap
            WHEN 12 THEN ce_delta
            WHEN 13 THEN ce_j_std
            WHEN 14 THEN ce_total_gap
            WHEN 15 THEN ce_utility_gap
        END AS estimate,
        CASE m.k
            WHEN 0 THEN sqrt(small_sample * ss_iw_j) / total_n
            WHEN 1 THEN sqrt(small_sample * ss_iw_p) / total_n
            WHEN 2 THEN sqrt(small_sample * ss_iw_j_auth) / total_n
            WHEN 3 THEN sqrt(small_sample * ss_iw_gap) / total_n
            WHEN 4 THEN sqrt(small_sample * ss_iw_delta) / NULLIF(total_changed, 0)
            WHEN 5 THEN sqrt(small_sample * ss_iw_j_std) / total_n
            WHEN 6 THEN sqrt(small_sample * ss_iw_total_gap) / total_n
            WHEN 7 THEN sqrt(small_sample * ss_iw_utility_gap) / total_n
            WHEN 8 THEN sqrt(small_sample * ss_ce_j) / clusters
            WHEN 9 THEN sqrt(small_sample * ss_ce_p) / clusters
            WHEN 10 THEN sqrt(small_sample * ss_ce_j_auth) / clusters
            WHEN 11 THEN sqrt(small_sample * ss_ce_gap) / clusters
            WHEN 12 THEN sqrt(small_sample * ss_ce_delta) / NULLIF(total_share_changed, 0)
            WHEN 13 THEN sqrt(small_sample * ss_ce_j_std) / clusters
            WHEN 14 THEN sqrt(small_sample * ss_ce_total_gap) / clusters
            WHEN 15 THEN sqrt(small_sample * ss_ce_utility_gap) / clusters
        END AS std_error,
        a.clusters
    FROM per_analysis AS a
    CROSS JOIN metric_names AS m
)
SELECT
    analysis,
    unit,
    metric,
    estimate,
    std_error,
    estimate + $z_lower * std_error AS ci_lower,
    estimate + $z_upper * std_error AS ci_upper,
    CAST(clusters AS BIGINT) AS n_clusters,
    'delta_method' AS interval_method
FROM errors
ORDER BY analysis, unit, metric
