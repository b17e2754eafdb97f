-- The anytime-valid p-value of each rule's bounds at one look: the smallest level alpha at which the
-- confidence sequence (sql/recurring/monitor_cs.sql, the same rho^2) lies wholly outside [lower, upper].
-- Inverting the radius: with d the distance from the estimate to the nearer side of the bounds it lies
-- beyond (d <= 0: the estimate is within the bounds, and no CS around it excludes them: p = 1),
--   p = min(1, sqrt(t rho^2 + 1) * exp(-d^2 t^2 rho^2 / (2 sigma^2 (t rho^2 + 1)))),
-- 0 when sigma = 0 and d > 0. Under a true value within the bounds, P(p <= a at any look) <= a
-- (asymptotically): the running minimum over looks is anytime-valid too.
-- A missing bound is open. NULL where the CS is undefined.
-- Input: monitor_cs (sql/recurring/monitor_cs.sql), cs_bounds(analysis, rule, unit, metric, lower, upper).
-- Output: analysis, rule, unit, metric, lower, upper, estimate, sigma, n_clusters, rho2, alpha,
-- cs_lower, cs_upper, p_value.
WITH joined AS (
    SELECT
        b.analysis,
        b.rule,
        b.unit,
        b.metric,
        b.lower,
        b.upper,
        c.estimate,
        c.sigma,
        c.n_clusters,
        c.rho2,
        c.alpha,
        c.cs_lower,
        c.cs_upper,
        CAST(c.n_clusters AS DOUBLE) AS t,
        greatest(coalesce(b.lower - c.estimate, CAST('-inf' AS DOUBLE)),
                 coalesce(c.estimate - b.upper, CAST('-inf' AS DOUBLE))) AS d
    FROM cs_bounds AS b
    JOIN monitor_cs AS c ON c.analysis = b.analysis AND c.unit = b.unit AND c.metric = b.metric
)
SELECT
    analysis,
    rule,
    unit,
    metric,
    lower,
    upper,
    estimate,
    sigma,
    n_clusters,
    rho2,
    alpha,
    cs_lower,
    cs_upper,
    CASE
        WHEN estimate IS NULL OR sigma IS NULL OR isnan(sigma) THEN NULL
        WHEN d <= 0 THEN 1.0
        WHEN sigma = 0 THEN 0.0
        ELSE least(1.0, sqrt(t * rho2 + 1.0) * exp(-(d * d) * (t * t) * rho2 / (2.0 * sigma * sigma * (t * rho2 + 1.0))))
    END AS p_value
FROM joined
ORDER BY analysis, rule
