-- Test oracle (tests/test_monitor_bounded.py): sql/recurring/monitor_period_moments.sql as it was before issue 30,
-- one row per cluster state and ratio, windowed per (cluster, ratio); the project's file sums the same
-- changes with one window over the cluster's periods for all ten ratios (equal to 1e-12).
-- What each period adds to the delta-method moments of each monitored ratio, per slice: the sums over
-- clusters of the change in Y_c, X_c and in the centred moments e_c^2, X_c e_c, X_c^2 (e_c = Y_c - K X_c,
-- K the slice's ratio over every cluster at its latest state), each cluster's change entering at the period
-- it appears in (sql/recurring/monitor_cluster_periods.sql: first seen, or seen again).
-- sql/recurring/monitor_look_ratios.sql cumulates them to each look. Centring on K keeps the sums of the size
-- of the residuals (utilities near 1e6 with SD 0.01 keep their width); K travels with the sums, so that
-- parts centred apart (a hub's sites) are re-centred on one K and added (autheval.sites.monitor).
-- Only the monitored metrics. Input: monitor_cluster_periods. Output: slice, unit, metric, period, k, d_y,
-- d_x, d_ee, d_xe, d_xx.
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
)
SELECT slice, unit, metric, period, any_value(k) AS k,
       fsum(d_y) AS d_y, fsum(d_x) AS d_x, fsum(d_ee) AS d_ee, fsum(d_xe) AS d_xe, fsum(d_xx) AS d_xx
FROM steps
GROUP BY slice, unit, metric, period
ORDER BY slice, unit, metric, period
