-- Each look of each rule decided: the confidence sequence drawn at the look's adjusted level (the
-- radius of sql/recurring/monitor_cs.sql, the same rho^2, alpha_adjusted in place of alpha), then
--   alert        when it lies wholly outside [lower, upper] (a missing bound is open),
--   pass         when it lies wholly inside,
--   insufficient otherwise, or below min_clusters, or where the metric is not available (the caller
--                words the reason).
-- Input: monitor_decisions(row_id, available, estimate, sigma, n_clusters, rho2, alpha_adjusted,
-- min_clusters, lower, upper). Output: row_id, cs_lower, cs_upper, status.
WITH radii AS (
    SELECT
        *,
        CAST(n_clusters AS DOUBLE) AS t,
        sigma * sqrt(2.0 * (CAST(n_clusters AS DOUBLE) * rho2 + 1.0)
                     / (CAST(n_clusters AS DOUBLE) * CAST(n_clusters AS DOUBLE) * rho2)
                     * ln(sqrt(CAST(n_clusters AS DOUBLE) * rho2 + 1.0) / alpha_adjusted)) AS radius
    FROM monitor_decisions
),
bands AS (
    SELECT row_id, available, n_clusters, min_clusters, lower, upper,
           estimate - radius AS cs_lower, estimate + radius AS cs_upper
    FROM radii
)
SELECT
    row_id,
    cs_lower,
    cs_upper,
    CASE
        WHEN NOT available OR cs_lower IS NULL OR isnan(cs_lower) THEN 'insufficient'
        WHEN n_clusters < min_clusters THEN 'insufficient'
        WHEN cs_upper < lower OR cs_lower > upper THEN 'alert'
        WHEN (lower IS NULL OR cs_lower >= lower) AND (upper IS NULL OR cs_upper <= upper) THEN 'pass'
        ELSE 'insufficient'
    END AS status
FROM bands
ORDER BY row_id
