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
-- $z_upper, bound by the caller). Each cluster is one row with both units' terms side by side (i_: its
-- sums as they are, image_weighted; c_: divided by n_c, cluster_equal), so the clusters are read and
-- joined once, not once per unit, and no pass reads another's rows held (the rows taken twice, one per
-- unit, and held, took 13.6 s and 1.8 GB at 10^7 clusters; now about 5 s and 160 MB; the same bits at
-- DuckDB limits from 600 MB to 4 GB, measured at 10^7 clusters). Two passes over the G rows: one aggregate
-- gives every ratio, and one join with that single row per analysis sums the squared residuals (summed
-- after R is known, not from raw moments: no cancellation when the residuals are small); then a row per
-- unit. NULL where undefined: one cluster (G - 1 = 0), no change (sum X = 0) or an
-- unscored column. Input: cluster_stats. Output: analysis, unit, metric, estimate, std_error,
-- ci_lower, ci_upper, n_clusters, interval_method ('delta_method').
WITH terms AS (  -- per cluster, X_c and Y_c of every metric in both units: i_ its sums as they are
    -- (image_weighted), c_ its sums divided by n_c (cluster_equal)
    SELECT
        analysis,
        n AS i_x_n,
        sum_changed AS i_x_changed,
        sum_exec AS i_y_exec,
        sum_prop AS i_y_prop,
        sum_gap AS i_y_gap,
        sum_glob AS i_y_glob,
        sum_total_gap AS i_y_total_gap,
        sum_utility_gap AS i_y_utility_gap,
        n / n AS c_x_n,
        sum_changed / n AS c_x_changed,
        sum_exec / n AS c_y_exec,
        sum_prop / n AS c_y_prop,
        sum_gap / n AS c_y_gap,
        sum_glob / n AS c_y_glob,
        sum_total_gap / n AS c_y_total_gap,
        sum_utility_gap / n AS c_y_utility_gap
    FROM cluster_stats
),
ratios AS (  -- pass 1: every ratio of both units, and the denominators' totals (`terms`' expressions, on
    -- cluster_stats itself: `terms` read by both passes would be held whole)
    SELECT
        analysis,
        CAST(count(*) AS DOUBLE) AS clusters,
        sum(n) AS i_total_n,
        sum(sum_changed) AS i_total_changed,
        sum(sum_exec) / sum(n) AS i_j,
        sum(sum_changed) / sum(n) AS i_p,
        sum(sum_prop) / sum(n) AS i_j_auth,
        sum(sum_gap) / sum(n) AS i_gap,
        sum(sum_gap) / NULLIF(sum(sum_changed), 0) AS i_delta,
        sum(sum_glob) / sum(n) AS i_j_std,
        sum(sum_total_gap) / sum(n) AS i_total_gap,
        sum(sum_utility_gap) / sum(n) AS i_utility_gap,
        sum(n / n) AS c_total_n,
        sum(sum_changed / n) AS c_total_changed,
        sum(sum_exec / n) / sum(n / n) AS c_j,
        sum(sum_changed / n) / sum(n / n) AS c_p,
        sum(sum_prop / n) / sum(n / n) AS c_j_auth,
        sum(sum_gap / n) / sum(n / n) AS c_gap,
        sum(sum_gap / n) / NULLIF(sum(sum_changed / n), 0) AS c_delta,
        sum(sum_glob / n) / sum(n / n) AS c_j_std,
        sum(sum_total_gap / n) / sum(n / n) AS c_total_gap,
        sum(sum_utility_gap / n) / sum(n / n) AS c_utility_gap
    FROM cluster_stats
    GROUP BY analysis
),
residuals AS (  -- pass 2: the squared linearised residuals Y_c - R X_c of both units, summed per analysis
    SELECT
        t.analysis,
        sum(power(t.i_y_exec - r.i_j * t.i_x_n, 2)) AS i_ss_j,
        sum(power(t.i_x_changed - r.i_p * t.i_x_n, 2)) AS i_ss_p,
        sum(power(t.i_y_prop - r.i_j_auth * t.i_x_n, 2)) AS i_ss_j_auth,
        sum(power(t.i_y_gap - r.i_gap * t.i_x_n, 2)) AS i_ss_gap,
        sum(power(t.i_y_gap - r.i_delta * t.i_x_changed, 2)) AS i_ss_delta,
        sum(power(t.i_y_glob - r.i_j_std * t.i_x_n, 2)) AS i_ss_j_std,
        sum(power(t.i_y_total_gap - r.i_total_gap * t.i_x_n, 2)) AS i_ss_total_gap,
        sum(power(t.i_y_utility_gap - r.i_utility_gap * t.i_x_n, 2)) AS i_ss_utility_gap,
        sum(power(t.c_y_exec - r.c_j * t.c_x_n, 2)) AS c_ss_j,
        sum(power(t.c_x_changed - r.c_p * t.c_x_n, 2)) AS c_ss_p,
        sum(power(t.c_y_prop - r.c_j_auth * t.c_x_n, 2)) AS c_ss_j_auth,
        sum(power(t.c_y_gap - r.c_gap * t.c_x_n, 2)) AS c_ss_gap,
        sum(power(t.c_y_gap - r.c_delta * t.c_x_changed, 2)) AS c_ss_delta,
        sum(power(t.c_y_glob - r.c_j_std * t.c_x_n, 2)) AS c_ss_j_std,
        sum(power(t.c_y_total_gap - r.c_total_gap * t.c_x_n, 2)) AS c_ss_total_gap,
        sum(power(t.c_y_utility_gap - r.c_utility_gap * t.c_x_n, 2)) AS c_ss_utility_gap
    FROM terms AS t
    JOIN ratios AS r ON r.analysis = t.analysis
    GROUP BY t.analysis
),
per_unit AS (  -- one row per analysis and unit: that unit's columns of the rows of ratios and residuals
    SELECT r.analysis, 'image_weighted' AS unit, r.clusters, r.i_total_n AS total_n, r.i_total_changed AS total_changed,
        r.i_j AS j, r.i_p AS p, r.i_j_auth AS j_auth, r.i_gap AS gap, r.i_delta AS delta, r.i_j_std AS j_std, r.i_total_gap AS total_gap, r.i_utility_gap AS utility_gap,
        e.i_ss_j AS ss_j, e.i_ss_p AS ss_p, e.i_ss_j_auth AS ss_j_auth, e.i_ss_gap AS ss_gap, e.i_ss_delta AS ss_delta, e.i_ss_j_std AS ss_j_std, e.i_ss_total_gap AS ss_total_gap, e.i_ss_utility_gap AS ss_utility_gap,
        r.clusters / NULLIF(r.clusters - 1, 0) AS small_sample  -- G / (G - 1)
    FROM ratios AS r JOIN residuals AS e ON e.analysis = r.analysis
    UNION ALL
    SELECT r.analysis, 'cluster_equal' AS unit, r.clusters, r.c_total_n AS total_n, r.c_total_changed AS total_changed,
        r.c_j AS j, r.c_p AS p, r.c_j_auth AS j_auth, r.c_gap AS gap, r.c_delta AS delta, r.c_j_std AS j_std, r.c_total_gap AS total_gap, r.c_utility_gap AS utility_gap,
        e.c_ss_j AS ss_j, e.c_ss_p AS ss_p, e.c_ss_j_auth AS ss_j_auth, e.c_ss_gap AS ss_gap, e.c_ss_delta AS ss_delta, e.c_ss_j_std AS ss_j_std, e.c_ss_total_gap AS ss_total_gap, e.c_ss_utility_gap AS ss_utility_gap,
        r.clusters / NULLIF(r.clusters - 1, 0) AS small_sample  -- G / (G - 1)
    FROM ratios AS r JOIN residuals AS e ON e.analysis = r.analysis
),
metric_names AS (  -- the metric of each output row (a cross join: per_unit is computed once)
    SELECT * FROM (VALUES
        ('J'), ('intervention_rate'), ('J_auth'), ('Delta_authority'), ('delta'), ('J_std'), ('Delta_total'),
        ('Delta_utility')
    ) AS names(metric)
),
errors AS (  -- per unit and metric: the ratio and sqrt(G / (G - 1) * sum of squares) / |sum X|
    SELECT
        a.analysis,
        a.unit,
        m.metric,
        CASE m.metric
            WHEN 'J' THEN j
            WHEN 'intervention_rate' THEN p
            WHEN 'J_auth' THEN j_auth
            WHEN 'Delta_authority' THEN gap
            WHEN 'delta' THEN delta
            WHEN 'J_std' THEN j_std
            WHEN 'Delta_total' THEN total_gap
            WHEN 'Delta_utility' THEN utility_gap
        END AS estimate,
        CASE m.metric
            WHEN 'J' THEN sqrt(small_sample * ss_j) / total_n
            WHEN 'intervention_rate' THEN sqrt(small_sample * ss_p) / total_n
            WHEN 'J_auth' THEN sqrt(small_sample * ss_j_auth) / total_n
            WHEN 'Delta_authority' THEN sqrt(small_sample * ss_gap) / total_n
            WHEN 'delta' THEN sqrt(small_sample * ss_delta) / NULLIF(total_changed, 0)
            WHEN 'J_std' THEN sqrt(small_sample * ss_j_std) / total_n
            WHEN 'Delta_total' THEN sqrt(small_sample * ss_total_gap) / total_n
            WHEN 'Delta_utility' THEN sqrt(small_sample * ss_utility_gap) / total_n
        END AS std_error,
        a.clusters
    FROM per_unit AS a
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
