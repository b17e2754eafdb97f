-- Each look's ratio metrics and their delta-method standard errors, in sql/estimates/delta_method.sql's
-- layout and with its definitions: R = sum Y / sum X over the look's clusters and
-- Var(R) = G / (G - 1) * sum_c (Y_c - R X_c)^2 / (sum X)^2, without re-reading earlier looks' records:
-- what each period adds (sql/recurring/monitor_period_moments.sql) cumulated to each look.
-- The sum of squares is summed in centred form, as delta_method.sql sums it after R is known: the moments
-- are those of e_c = Y_c - K X_c, K near the slice's ratio, and
--   sum_c (Y_c - R X_c)^2 = sum e_c^2 - 2 (R - K) sum X_c e_c + (R - K)^2 sum X_c^2,
-- where e_c is of the size of the residuals and R - K of the look's deviation from K: no raw moments of
-- large values cancel. A slice's period may come in several parts (a hub's sites, autheval.sites.monitor),
-- each centred on its own k: parts that share one k (one lake: one part per slice) keep it; otherwise K is
-- the ratio of the parts' sums and each part is re-centred on it (e' = e + (k - K) X, so
-- e'^2 = e^2 + 2 (k - K) X e + (k - K)^2 X^2 and X e' = X e + (k - K) X^2) before they are added.
-- Input: monitor_period_moments, monitor_look_sums. Output: analysis ('<slice>/<look>'), unit, metric,
-- estimate, std_error, n_clusters (sql/recurring/monitor_cs.sql reads it as monitor_delta_method).
WITH centres AS (
    SELECT
        slice, unit, metric,
        CASE WHEN min(k) = max(k) THEN min(k) ELSE coalesce(fsum(d_y) / NULLIF(fsum(d_x), 0), 0.0) END AS k
    FROM monitor_period_moments
    GROUP BY slice, unit, metric
),
recentred AS (
    SELECT
        m.slice, m.unit, m.metric, m.period, c.k, m.d_y, m.d_x,
        CASE WHEN m.k = c.k THEN m.d_ee
             ELSE m.d_ee + 2.0 * (m.k - c.k) * m.d_xe + (m.k - c.k) * (m.k - c.k) * m.d_xx END AS d_ee,
        CASE WHEN m.k = c.k THEN m.d_xe ELSE m.d_xe + (m.k - c.k) * m.d_xx END AS d_xe,
        m.d_xx
    FROM monitor_period_moments AS m
    JOIN centres AS c ON c.slice = m.slice AND c.unit = m.unit AND c.metric = m.metric
),
per_period AS (
    SELECT slice, unit, metric, period, any_value(k) AS k,
           fsum(d_y) AS d_y, fsum(d_x) AS d_x, fsum(d_ee) AS d_ee, fsum(d_xe) AS d_xe, fsum(d_xx) AS d_xx
    FROM recentred
    GROUP BY slice, unit, metric, period
),
cumulated AS (
    SELECT
        p.slice, l.look, p.unit, p.metric, p.k, l.n_clusters,
        CAST(l.n_clusters AS DOUBLE) / NULLIF(l.n_clusters - 1, 0) AS small_sample,
        sum(p.d_y) OVER t AS sy, sum(p.d_x) OVER t AS sx,
        sum(p.d_ee) OVER t AS qee, sum(p.d_xe) OVER t AS qxe, sum(p.d_xx) OVER t AS qxx
    FROM per_period AS p
    JOIN monitor_look_sums AS l ON l.slice = p.slice AND l.period = p.period
    WINDOW t AS (PARTITION BY p.slice, p.unit, p.metric ORDER BY l.look ROWS UNBOUNDED PRECEDING)
),
ratios AS (
    SELECT *, sy / NULLIF(sx, 0) AS estimate, sy / NULLIF(sx, 0) - k AS shift FROM cumulated
)
SELECT
    CAST(slice AS VARCHAR) || '/' || CAST(look AS VARCHAR) AS analysis,
    unit,
    metric,
    estimate,
    sqrt(small_sample * greatest(qee - 2.0 * shift * qxe + shift * shift * qxx, 0.0)) / NULLIF(sx, 0) AS std_error,
    n_clusters
FROM ratios
ORDER BY slice, look, unit, metric
