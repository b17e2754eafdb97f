-- What each period adds to the delta-method moments of each monitored ratio, per slice: the sums over
-- clusters of the change in Y_c, X_c and in the centred moments e_c^2, X_c e_c, X_c^2 (e_c = Y_c - K X_c,
-- K the slice's ratio over every cluster at its latest state), each cluster's change entering at the period
-- it appears in (sql/recurring/monitor_cluster_periods.sql: first seen, or seen again).
-- sql/recurring/monitor_look_ratios.sql cumulates them to each look. Centring on K keeps the sums of the size
-- of the residuals (utilities near 1e6 with SD 0.01 keep their width); K travels with the sums, so that
-- parts centred apart (a hub's sites) are re-centred on one K and added (autheval.sites.monitor).
-- Only the monitored metrics: ratio j of `ratios` is (Y[j], X[j]) of each cluster state (delta_method.sql's).
-- One window over each cluster's periods gives its state before (the lags of its sums) and whether a state
-- is its latest; the ten ratios are unfolded after it, into sums that need no sort (one row per cluster state
-- and ratio, sorted twice, took most of a monitor run: issue 30, docs/benchmarks.md).
-- Input: monitor_cluster_periods. Output: slice, unit, metric, period, k, d_y, d_x, d_ee, d_xe, d_xx.
WITH ratios(j, unit, metric) AS (
    VALUES (1, 'image_weighted', 'J'), (2, 'image_weighted', 'intervention_rate'), (3, 'image_weighted', 'J_auth'),
           (4, 'image_weighted', 'Delta_authority'), (5, 'image_weighted', 'delta'), (6, 'cluster_equal', 'J'),
           (7, 'cluster_equal', 'intervention_rate'), (8, 'cluster_equal', 'J_auth'),
           (9, 'cluster_equal', 'Delta_authority'), (10, 'cluster_equal', 'delta')
),
lagged AS MATERIALIZED (  -- each cluster state, the state before it (NULL: first seen), and whether it is the latest
    SELECT slice, period, n, ch, ex, pr, gp,
           lag(n) OVER w AS n0, lag(ch) OVER w AS ch0, lag(ex) OVER w AS ex0, lag(pr) OVER w AS pr0,
           lag(gp) OVER w AS gp0, lead(period) OVER w IS NULL AS latest
    FROM monitor_cluster_periods
    WINDOW w AS (PARTITION BY slice, site, cluster_id ORDER BY period)
),
pairs AS NOT MATERIALIZED (  -- every state once per ratio, (Y, X) now and before (cluster_equal: means to date);
    -- streamed into both passes, never held (held, its ten rows per state were most of a monitor run's memory)
    SELECT slice, period, latest, j,
           [ex, ch, pr, gp, gp, ex / n, ch / n, pr / n, gp / n, gp / n][j] AS y,
           [n, n, n, n, ch, 1e0, 1e0, 1e0, 1e0, ch / n][j] AS x,
           [ex0, ch0, pr0, gp0, gp0, ex0 / n0, ch0 / n0, pr0 / n0, gp0 / n0, gp0 / n0][j] AS y0,
           CASE WHEN n0 IS NOT NULL THEN [n0, n0, n0, n0, ch0, 1e0, 1e0, 1e0, 1e0, ch0 / n0][j] END AS x0
    FROM lagged
    CROSS JOIN ratios
),
centres AS (  -- K: the ratio over every cluster of the slice at its latest state (0 where undefined)
    SELECT slice, j, coalesce(fsum(y) / NULLIF(fsum(x), 0), 0.0) AS k
    FROM pairs
    WHERE latest
    GROUP BY slice, j
),
centred AS (
    SELECT p.*, c.k, p.y - c.k * p.x AS e, p.y0 - c.k * p.x0 AS e0
    FROM pairs AS p
    JOIN centres AS c ON c.slice = p.slice AND c.j = p.j
)
SELECT  -- what each period changes: the moments now minus the moments before (0 when first seen)
    c.slice, r.unit, r.metric, c.period, any_value(c.k) AS k,
    fsum(c.y - coalesce(c.y0, 0)) AS d_y,
    fsum(c.x - coalesce(c.x0, 0)) AS d_x,
    fsum(c.e * c.e - coalesce(c.e0 * c.e0, 0)) AS d_ee,
    fsum(c.x * c.e - coalesce(c.x0 * c.e0, 0)) AS d_xe,
    fsum(c.x * c.x - coalesce(c.x0 * c.x0, 0)) AS d_xx
FROM centred AS c
JOIN ratios AS r ON r.j = c.j
GROUP BY c.slice, r.unit, r.metric, c.period
ORDER BY c.slice, r.unit, r.metric, c.period
