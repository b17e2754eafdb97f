-- Each look's ratio metrics and their delta-method standard errors, in sql/estimates/delta_method.sql's
-- layout and with its definitions: R = sum Y / sum X over the look's clusters and
-- Var(R) = G / (G - 1) * sum_c (Y_c - R X_c)^2 / (sum X)^2, without re-reading earlier looks' records.
-- Each cluster's (Y_c, X_c) changes at the periods it appears in (sql/recurring/monitor_cluster_periods.sql:
-- first seen, or seen again); the change of its moments enters at that period and is cumulated to each look.
-- The sum of squares is summed in centred form, as delta_method.sql sums it after R is known: the moments
-- are those of e_c = Y_c - K X_c, K the slice's ratio over every cluster (its latest look), and
--   sum_c (Y_c - R X_c)^2 = sum e_c^2 - 2 (R - K) sum X_c e_c + (R - K)^2 sum X_c^2,
-- where e_c is of the size of the residuals and R - K of the look's deviation from the latest ratio: no raw
-- moments of large values cancel (utilities near 1e6 with SD 0.01 keep their width). Only the monitored
-- metrics. Input: monitor_cluster_periods, monitor_look_sums. Output: analysis ('<slice>/<look>'), unit,
-- metric, estimate, std_error, n_clusters (sql/recurring/monitor_cs.sql reads it as monitor_delta_method).
WITH states AS (  -- the cluster's means to date (cluster_equal)
    SELECT *, ex / n AS mex, ch / n AS mch, pr / n AS mpr, gp / n AS mgp FROM monitor_cluster_periods
),
pairs AS (  -- every cluster state once per ratio: its Y_c and X_c (delta_method.sql's)
    SELECT slice, site, cluster_id, period, 'image_weighted' AS unit, 'J' AS metric, ex AS y, n AS x FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'image_weighted', 'intervention_rate', ch, n FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'image_weighted', 'J_auth', pr, n FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'image_weighted', 'Delta_authority', gp, n FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'image_weighted', 'delta', gp, ch FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'cluster_equal', 'J', mex, 1e0 FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'cluster_equal', 'intervention_rate', mch, 1e0 FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'cluster_equal', 'J_auth', mpr, 1e0 FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'cluster_equal', 'Delta_authority', mgp, 1e0 FROM states
    UNION ALL SELECT slice, site, cluster_id, period, 'cluster_equal', 'delta', mgp, mch FROM states
),
latest AS (  -- each cluster's latest state
    SELECT * FROM pairs
    QUALIFY row_number() OVER (PARTITION BY slice, site, cluster_id, unit, metric ORDER BY period DESC) = 1
),
centres AS (  -- K: the ratio over every cluster of the slice (0 where undefined)
    SELECT slice, unit, metric, coalesce(fsum(y) / NULLIF(fsum(x), 0), 0.0) AS k
    FROM latest
    GROUP BY slice, unit, metric
),
centred AS (
    SELECT p.*, c.k, p.y - c.k * p.x AS e
    FROM pairs AS p
    JOIN centres AS c ON c.slice = p.slice AND c.unit = p.unit AND c.metric = p.metric
),
steps AS (  -- what this period changes: the moments now minus the moments before (0 when first seen)
    SELECT
        slice, unit, metric, period, k,
        y - coalesce(lag(y) OVER c, 0) AS d_y,
        x - coalesce(lag(x) OVER c, 0) AS d_x,
        e * e - coalesce(lag(e * e) OVER c, 0) AS d_ee,
        x * e - coalesce(lag(x * e) OVER c, 0) AS d_xe,
        x * x - coalesce(lag(x * x) OVER c, 0) AS d_xx
    FROM centred
    WINDOW c AS (PARTITION BY slice, site, cluster_id, unit, metric ORDER BY period)
),
per_period AS (
    SELECT slice, unit, metric, period, any_value(k) AS k,
           fsum(d_y) AS d_y, fsum(d_x) AS d_x, fsum(d_ee) AS d_ee, fsum(d_xe) AS d_xe, fsum(d_xx) AS d_xx
    FROM steps
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
