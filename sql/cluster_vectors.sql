-- Each analysis's cluster statistics as dense vectors in cluster_rank order, ready for the
-- replicate dot products of replicates_exact.sql. Image-unit vectors hold cluster sums; the
-- cluster-unit vectors (mean_*) hold per-cluster means. Unavailable scores become 0.0 here (a dot
-- product cannot take NULL); their metrics are masked as unavailable by the caller.
-- DuckDB-only: list(... ORDER BY ...) and the DOUBLE[] type.
SELECT
    analysis,
    n_clusters,
    list(n ORDER BY cluster_rank) AS v_n,
    list(coalesce(sum_changed, 0.0) ORDER BY cluster_rank) AS v_changed,
    list(coalesce(sum_exec, 0.0) ORDER BY cluster_rank) AS v_exec,
    list(coalesce(sum_prop, 0.0) ORDER BY cluster_rank) AS v_prop,
    list(coalesce(sum_gap, 0.0) ORDER BY cluster_rank) AS v_gap,
    list(coalesce(sum_glob, 0.0) ORDER BY cluster_rank) AS v_glob,
    list(coalesce(sum_total_gap, 0.0) ORDER BY cluster_rank) AS v_total_gap,
    list(coalesce(sum_utility_gap, 0.0) ORDER BY cluster_rank) AS v_utility_gap,
    list(coalesce(sum_changed / n, 0.0) ORDER BY cluster_rank) AS v_mean_changed,
    list(coalesce(sum_exec / n, 0.0) ORDER BY cluster_rank) AS v_mean_exec,
    list(coalesce(sum_prop / n, 0.0) ORDER BY cluster_rank) AS v_mean_prop,
    list(coalesce(sum_gap / n, 0.0) ORDER BY cluster_rank) AS v_mean_gap,
    list(coalesce(sum_glob / n, 0.0) ORDER BY cluster_rank) AS v_mean_glob,
    list(coalesce(sum_total_gap / n, 0.0) ORDER BY cluster_rank) AS v_mean_total_gap,
    list(coalesce(sum_utility_gap / n, 0.0) ORDER BY cluster_rank) AS v_mean_utility_gap
FROM cluster_stats
GROUP BY analysis, n_clusters
