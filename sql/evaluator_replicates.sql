-- Replicate values of the `evaluator` scheme in the replicate_metrics layout (rep = -1 = point):
-- image_weighted = resampled sum of values / resampled case count; cluster_equal = mean of the
-- resampled per-cluster means. Each metric joins its own stream (seed = $seed + offset).
-- Input: evaluator_vectors, boot_multiplicities(seed, n_clusters, rep, mult DOUBLE[]).
-- DuckDB-only: list_dot_product.
SELECT analysis, CAST(-1 AS BIGINT) AS rep, 'image_weighted' AS unit, metric, point_image AS value
FROM evaluator_vectors
UNION ALL
SELECT analysis, -1, 'cluster_equal', metric, point_cluster
FROM evaluator_vectors
UNION ALL
SELECT v.analysis, b.rep, 'image_weighted', v.metric,
       list_dot_product(b.mult, v.v_sum) / list_dot_product(b.mult, v.v_n)
FROM evaluator_vectors AS v
JOIN boot_multiplicities AS b
  ON b.seed = CAST($seed AS BIGINT) + v.seed_offset AND b.n_clusters = v.n_clusters
UNION ALL
SELECT v.analysis, b.rep, 'cluster_equal', v.metric,
       list_dot_product(b.mult, v.v_mean) / v.n_clusters
FROM evaluator_vectors AS v
JOIN boot_multiplicities AS b
  ON b.seed = CAST($seed AS BIGINT) + v.seed_offset AND b.n_clusters = v.n_clusters
