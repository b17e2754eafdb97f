-- Anytime-valid confidence sequences of the monitored ratio metrics, both units, for every analysis
-- at once: the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Howard and Ramdas
-- (time-uniform central limit theory; the two-sided Gaussian-mixture boundary) applied to the
-- delta-method linearisation of each ratio over clusters.
-- With t = G the clusters to date, R the ratio and std_error its delta-method standard error
-- (sql/estimates/delta_method.sql: Var(R) = G / (G - 1) * sum_c (Y_c - R X_c)^2 / (sum_c X_c)^2), the
-- linearised influence values psi_c = (Y_c - R X_c) / mean(X) have the variance estimate
-- sigma^2 = sum_c psi_c^2 / (G - 1) = G * std_error^2, and the CS at level alpha is
--   R +- sigma * sqrt(2 (t rho^2 + 1) / (t^2 rho^2) * ln(sqrt(t rho^2 + 1) / alpha)),
-- rho^2 ($rho2, bound by the caller) tuned so that the boundary is tightest at the declared horizon.
-- The same radius at another level is sql/recurring/monitor_status.sql's (the adjusted levels of a protocol).
-- NULL where undefined: one cluster, no change (delta), an unscored column.
-- Input: monitor_delta_method (sql/estimates/delta_method.sql's output). Output: analysis, unit, metric,
-- estimate, sigma, n_clusters, rho2, alpha, cs_lower, cs_upper.
WITH monitored AS (
    SELECT
        analysis,
        unit,
        metric,
        estimate,
        std_error * sqrt(CAST(n_clusters AS DOUBLE)) AS sigma,
        n_clusters,
        CAST(n_clusters AS DOUBLE) AS t
    FROM monitor_delta_method
    WHERE metric IN ('Delta_authority', 'intervention_rate', 'delta', 'J', 'J_auth')
),
radii AS (
    SELECT
        *,
        sigma * sqrt(2.0 * (t * $rho2 + 1.0) / (t * t * $rho2) * ln(sqrt(t * $rho2 + 1.0) / $alpha)) AS radius
    FROM monitored
)
SELECT
    analysis,
    unit,
    metric,
    estimate,
    sigma,
    n_clusters,
    CAST($rho2 AS DOUBLE) AS rho2,
    CAST($alpha AS DOUBLE) AS alpha,
    estimate - radius AS cs_lower,
    estimate + radius AS cs_upper
FROM radii
ORDER BY analysis, unit, metric
