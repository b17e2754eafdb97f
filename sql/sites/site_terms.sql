-- A site's per-cluster terms of the delta method, as estimates/delta_method.sql forms them (its `terms`:
-- image_weighted takes a cluster's sums, cluster_equal its means), for the site export's centred
-- second moments (autheval/sites/export.py), which never leave the site as rows: only their totals,
-- means and centred cross-products over clusters do. An unscored column is 0.0 here, as in
-- records/cluster_matrix.sql (its metrics are masked by the record level). Ordered by analysis, unit
-- and cluster rank, so the same record gives the same moments to the bit. Input: cluster_stats.
WITH units AS (
    SELECT * FROM (VALUES ('image_weighted'), ('cluster_equal')) AS u(unit)
),
weighted AS (
    SELECT s.*, u.unit, CASE WHEN u.unit = 'image_weighted' THEN 1e0 ELSE s.n END AS d
    FROM cluster_stats AS s
    CROSS JOIN units AS u
)
SELECT
    analysis,
    unit,
    n / d AS x_n,
    coalesce(sum_changed / d, 0.0) AS x_changed,
    coalesce(sum_exec / d, 0.0) AS y_exec,
    coalesce(sum_prop / d, 0.0) AS y_prop,
    coalesce(sum_gap / d, 0.0) AS y_gap,
    coalesce(sum_glob / d, 0.0) AS y_glob,
    coalesce(sum_total_gap / d, 0.0) AS y_total_gap,
    coalesce(sum_utility_gap / d, 0.0) AS y_utility_gap
FROM weighted
ORDER BY analysis, unit, cluster_rank
