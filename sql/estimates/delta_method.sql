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
-- $z_upper, bound by the caller). Each metric is written once, for both units: every cluster row is
-- taken twice, its sums as they are (image_weighted) and divided by n_c (cluster_equal), so Y_c and
-- X_c are one expression per metric. Two passes over those 2G rows, whatever the number of metrics:
-- one aggregate gives every ratio, and one join with that single row per analysis and unit sums the
-- squared residuals (summed after R is known, not from raw moments: no cancellation when the
-- residuals are small). Dividing and multiplying by 1 are exact, so each unit's numbers are those of
-- its own sums. NULL where undefined: one cluster (G - 1 = 0), no change (sum X = 0) or an
-- unscored column. Input: cluster_stats. Output: analysis, unit, metric, estimate, std_error,
-- ci_lower, ci_upper, n_clusters, interval_method ('delta_method').
WITH units AS (  -- image_weighted takes a cluster's sums as they are, cluster_equal its means
    SELECT * FROM (VALUES ('image_weighted'), ('cluster_equal')) AS u(unit)
),
weighted AS (  -- every cluster once per unit, with the divisor of its sums (1, or its case count)
    SELECT s.*, u.unit, CASE WHEN u.unit = 'image_weighted' THEN 1e0 ELSE s.n END AS d
    FROM cluster_stats AS s
    CROSS JOIN units AS u
),
terms AS (  -- per cluster and unit: X_c (cases, changed cases) and the Y_c of every metric
    SELECT
        analysis,
        unit,
        n / d AS x_n,
        sum_changed / d AS x_changed,
        sum_exec / d AS y_exec,
        sum_prop / d AS y_prop,
        sum_gap / d AS y_gap,
        sum_glob / d AS y_glob,
        sum_total_gap / d AS y_total_gap,
        sum_utility_gap / d AS y_utility_gap
    FROM weighted
),
ratios AS (  -- pass 1: every ratio, and the denominators' totals
    SELECT
        analysis,
        unit,
        CAST(count(*) AS DOUBLE) AS clusters,
        sum(x_n) AS total_n,
        sum(x_changed) AS total_changed,
        sum(y_exec) / sum(x_n) AS j,
        sum(x_changed) / sum(x_n) AS p,
        sum(y_prop) / sum(x_n) AS j_auth,
        sum(y_gap) / sum(x_n) AS gap,
        sum(y_gap) / NULLIF(sum(x_changed), 0) AS delta,
        sum(y_glob) / sum(x_n) AS j_std,
        sum(y_total_gap) / sum(x_n) AS total_gap,
        sum(y_utility_gap) / sum(x_n) AS utility_gap
    FROM terms
    GROUP BY analysis, unit
),
residuals AS (  -- pass 2: the squared linearised residuals Y_c - R X_c, summed per analysis and unit
    SELECT
        t.analysis,
        t.unit,
        sum(power(t.y_exec - r.j * t.x_n, 2)) AS ss_j,
        sum(power(t.x_changed - r.p * t.x_n, 2)) AS ss_p,
        sum(power(t.y_prop - r.j_auth * t.x_n, 2)) AS ss_j_auth,
        sum(power(t.y_gap - r.gap * t.x_n, 2)) AS ss_gap,
        sum(power(t.y_gap - r.delta * t.x_changed, 2)) AS ss_delta,
        sum(power(t.y_glob - r.j_std * t.x_n, 2)) AS ss_j_std,
        sum(power(t.y_total_gap - r.total_gap * t.x_n, 2)) AS ss_total_gap,
        sum(power(t.y_utility_gap - r.utility_gap * t.x_n, 2)) AS ss_utility_gap
    FROM terms AS t
    JOIN ratios AS r ON r.analysis = t.analysis AND r.unit = t.unit
    GROUP BY t.analysis, t.unit
),
per_unit AS (
    SELECT r.*, e.ss_j, e.ss_p, e.ss_j_auth, e.ss_gap, e.ss_delta, e.ss_j_std, e.ss_total_gap, e.ss_utility_gap,
           clusters / NULLIF(clusters - 1, 0) AS small_sample  -- G / (G - 1)
    FROM ratios AS r
    JOIN residuals AS e ON e.analysis = r.analysis AND e.unit = r.unit
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
