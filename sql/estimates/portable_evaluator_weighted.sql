-- Twin: none in SQL: in process, estimates/evaluator_clusters.sql's columns times numpy's multiplicities.
-- The `evaluator` scheme's replicate sums from a replicate-weights table joined in: each metric's own
-- numpy stream (seed + seed_offset over that metric's clusters), drawn in Python and shipped as
-- replicate_weights(seed_offset, n_clusters, rep, cluster_rank, mult), mult > 0 only.
-- Input: evaluator_clusters (estimates/portable_evaluator_clusters.sql), replicate_weights. Output: the
-- evaluator_sums layout (analysis, metric, rep, w_s, w_n, c_m, c_k), which estimates/evaluator_metrics.sql turns
-- into metrics.
SELECT
    c.analysis,
    c.metric,
    CAST(w.rep AS BIGINT) AS rep,
    sum(w.mult * c.s) AS w_s,
    sum(w.mult * c.n) AS w_n,
    sum(w.mult * c.m) AS c_m,
    sum(w.mult * c.k) AS c_k
FROM evaluator_clusters AS c
JOIN replicate_weights AS w
    ON w.seed_offset = c.seed_offset AND w.n_clusters = c.n_clusters AND w.cluster_rank = c.cluster_rank
GROUP BY c.analysis, c.metric, w.rep
