-- Replicate sums of the exact (numpy-stream) schemes: one dot product per statistic between a
-- replicate's cluster multiplicities and the analysis's cluster vectors. Every analysis with the
-- same number of clusters shares the same replicates (AuthEval's one shared resampling stream).
-- Input: boot_multiplicities(n_clusters, rep, mult DOUBLE[]) and cluster_vectors.
-- Output: the replicate-sum layout of replicates_point.sql (one row per analysis and replicate).
-- DuckDB-only: list_dot_product.
SELECT
    v.analysis,
    b.rep,
    list_dot_product(b.mult, v.v_n) AS w_n,
    list_dot_product(b.mult, v.v_changed) AS w_changed,
    list_dot_product(b.mult, v.v_exec) AS w_exec,
    list_dot_product(b.mult, v.v_prop) AS w_prop,
    list_dot_product(b.mult, v.v_gap) AS w_gap,
    list_dot_product(b.mult, v.v_glob) AS w_glob,
    list_dot_product(b.mult, v.v_total_gap) AS w_total_gap,
    list_dot_product(b.mult, v.v_utility_gap) AS w_utility_gap,
    CAST(v.n_clusters AS DOUBLE) AS c_n,
    list_dot_product(b.mult, v.v_mean_changed) AS c_changed,
    list_dot_product(b.mult, v.v_mean_exec) AS c_exec,
    list_dot_product(b.mult, v.v_mean_prop) AS c_prop,
    list_dot_product(b.mult, v.v_mean_gap) AS c_gap,
    list_dot_product(b.mult, v.v_mean_glob) AS c_glob,
    list_dot_product(b.mult, v.v_mean_total_gap) AS c_total_gap,
    list_dot_product(b.mult, v.v_mean_utility_gap) AS c_utility_gap
FROM boot_multiplicities AS b
JOIN cluster_vectors AS v ON v.n_clusters = b.n_clusters
