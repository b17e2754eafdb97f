-- Each look's ratio metrics and their delta-method standard errors from the look's cluster moments
-- (sql/recurring/monitor_look_sums.sql), in sql/estimates/delta_method.sql's layout and with its definitions: R = sum Y /
-- sum X and Var(R) = G / (G - 1) * sum_c (Y_c - R X_c)^2 / (sum X)^2, the sum of squares expanded as
-- sum Y^2 - 2 R sum X Y + R^2 sum X^2 (clipped at 0 against rounding). Only the monitored metrics.
-- Input: monitor_look_sums. Output: analysis ('<slice>/<look>'), unit, metric, estimate, std_error,
-- n_clusters (sql/recurring/monitor_cs.sql reads it as monitor_delta_method).
WITH looks AS (
    SELECT *, CAST(n_clusters AS DOUBLE) AS g, CAST(n_clusters AS DOUBLE) / NULLIF(n_clusters - 1, 0) AS small_sample
    FROM monitor_look_sums
),
pairs AS (  -- per metric: the ratio's sum Y, sum X, sum Y^2, sum X Y, sum X^2
    SELECT slice, look, n_clusters, small_sample, 'image_weighted' AS unit, 'J' AS metric,
           s_ex AS sy, s_n AS sx, q_ex AS qy, c_ex_n AS cxy, q_n AS qx FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'image_weighted', 'intervention_rate', s_ch, s_n, q_ch, c_ch_n, q_n FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'image_weighted', 'J_auth', s_pr, s_n, q_pr, c_pr_n, q_n FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'image_weighted', 'Delta_authority', s_gp, s_n, q_gp, c_gp_n, q_n FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'image_weighted', 'delta', s_gp, s_ch, q_gp, c_gp_ch, q_ch FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'cluster_equal', 'J', s_mex, g, q_mex, s_mex, g FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'cluster_equal', 'intervention_rate', s_mch, g, q_mch, s_mch, g FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'cluster_equal', 'J_auth', s_mpr, g, q_mpr, s_mpr, g FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'cluster_equal', 'Delta_authority', s_mgp, g, q_mgp, s_mgp, g FROM looks
    UNION ALL SELECT slice, look, n_clusters, small_sample, 'cluster_equal', 'delta', s_mgp, s_mch, q_mgp, c_mgp_mch, q_mch FROM looks
),
ratios AS (
    SELECT *, sy / NULLIF(sx, 0) AS estimate FROM pairs
)
SELECT
    CAST(slice AS VARCHAR) || '/' || CAST(look AS VARCHAR) AS analysis,
    unit,
    metric,
    estimate,
    sqrt(small_sample * greatest(qy - 2.0 * estimate * cxy + estimate * estimate * qx, 0.0)) / NULLIF(sx, 0) AS std_error,
    n_clusters
FROM ratios
ORDER BY slice, look, unit, metric
