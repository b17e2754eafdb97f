-- The simulated deployments' per-cluster sums of each month (autheval.monitoring.deployment_sim.simulate, many
-- deployments at once): one row per (deployment, site, month, cluster), the sums sql/records/cluster_stats.sql
-- makes of a landed log. Input: sim_cases(deployment, site, month, cluster, intervened, u_executed,
-- u_proposed, u_global). Output: deployment, site, month, cluster, n, sum_changed, sum_exec, sum_prop,
-- sum_gap, sum_glob, sum_total_gap, sum_utility_gap.
SELECT
    deployment,
    site,
    month,
    cluster,
    CAST(count(*) AS DOUBLE) AS n,
    CAST(sum(CAST(intervened AS INTEGER)) AS DOUBLE) AS sum_changed,
    sum(u_executed) AS sum_exec,
    sum(u_proposed) AS sum_prop,
    sum(u_proposed - u_executed) AS sum_gap,
    sum(u_global) AS sum_glob,
    sum(u_global - u_executed) AS sum_total_gap,
    sum(u_global - u_proposed) AS sum_utility_gap
FROM sim_cases
GROUP BY deployment, site, month, cluster
