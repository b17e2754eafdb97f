-- Twin: estimates/replicates_point.sql for the point (the in-process DuckDB: fsum, no weights table); in process
-- the replicates are numpy's multiplicities times records/cluster_matrix.sql (autheval/estimation/bootstrap.py).
-- Replicate sums from a replicate-weights table joined in: the portable form of the exact schemes.
-- replicate_weights(n_clusters, rep, cluster_rank, mult) holds the multiplicity of every drawn cluster
-- rank in every replicate of the stream for clusters of size n_clusters (numpy's exact stream, drawn
-- in Python: the one engine-specific step), only where mult > 0; rep = -1 carries mult 1 for every
-- rank, the point estimate. A replicate's weighted sums are then a join and a GROUP BY, on any engine.
-- Input: cluster_stats, replicate_weights. Output: the layout of estimates/replicates_point.sql.
SELECT
    s.analysis,
    CAST(w.rep AS BIGINT) AS rep,
    sum(w.mult * s.n) AS w_n,
    sum(w.mult * s.sum_changed) AS w_changed,
    sum(w.mult * s.sum_exec) AS w_exec,
    sum(w.mult * s.sum_prop) AS w_prop,
    sum(w.mult * s.sum_gap) AS w_gap,
    sum(w.mult * s.sum_glob) AS w_glob,
    sum(w.mult * s.sum_total_gap) AS w_total_gap,
    sum(w.mult * s.sum_utility_gap) AS w_utility_gap,
    sum(w.mult) AS c_n,
    sum(w.mult * s.sum_changed / s.n) AS c_changed,
    sum(w.mult * s.sum_exec / s.n) AS c_exec,
    sum(w.mult * s.sum_prop / s.n) AS c_prop,
    sum(w.mult * s.sum_gap / s.n) AS c_gap,
    sum(w.mult * s.sum_glob / s.n) AS c_glob,
    sum(w.mult * s.sum_total_gap / s.n) AS c_total_gap,
    sum(w.mult * s.sum_utility_gap / s.n) AS c_utility_gap
FROM cluster_stats AS s
JOIN replicate_weights AS w ON w.n_clusters = s.n_clusters AND w.cluster_rank = s.cluster_rank
GROUP BY s.analysis, w.rep
