-- Every monthly look of every simulated deployment, per site and pooled over its sites, as one
-- analysis in sql/records/cluster_stats.sql's layout: look L (1-based) holds the clusters seen in months 1..L,
-- a lesion seen in several months summed into one cluster (as the monitor pools a slice's data to
-- date). Slices 0 .. $sites - 1 are the sites, slice $sites every site ('all'); analysis =
-- (deployment * ($sites + 1) + slice) * $months + L - 1, so that one query of sql/estimates/delta_method.sql or
-- autheval.monitoring.monitor.confidence_sequences decides every look of every deployment at once.
-- Input: sim_cluster_months, sql/records/cluster_sums.sql of the simulated cases with analysis =
-- (deployment * $sites + site) * $months + month (cluster numbers are unique over sites). Output: analysis, cluster_id, n, sum_changed, sum_exec, sum_prop, sum_gap, sum_glob,
-- sum_total_gap, sum_utility_gap.
WITH looks AS (
    SELECT CAST(range AS INTEGER) AS look FROM range(1, CAST($months AS BIGINT) + 1)
),
months AS (
    SELECT
        *,
        analysis // ($sites * $months) AS deployment,
        (analysis // $months) % $sites AS site,
        analysis % $months AS month,
        cluster_id AS cluster
    FROM sim_cluster_months
),
sliced AS (
    SELECT *, site AS slice FROM months
    UNION ALL
    SELECT *, CAST($sites AS INTEGER) AS slice FROM months
)
SELECT
    (CAST(c.deployment AS BIGINT) * ($sites + 1) + c.slice) * $months + l.look - 1 AS analysis,
    c.cluster AS cluster_id,
    sum(c.n) AS n,
    sum(c.sum_changed) AS sum_changed,
    sum(c.sum_exec) AS sum_exec,
    sum(c.sum_prop) AS sum_prop,
    sum(c.sum_gap) AS sum_gap,
    sum(c.sum_glob) AS sum_glob,
    sum(c.sum_total_gap) AS sum_total_gap,
    sum(c.sum_utility_gap) AS sum_utility_gap
FROM sliced AS c
JOIN looks AS l ON c.month < l.look
GROUP BY c.deployment, c.slice, l.look, c.cluster
