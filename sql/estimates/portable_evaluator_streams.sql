-- Twin: estimates/evaluator_stream_runs.sql (the in-process DuckDB). Differs: one row per stream here (its
-- weights are shipped once); there, one per analysis and metric in row order.
-- The numpy streams of the `evaluator` scheme: one per metric offset and cluster count.
-- Input: evaluator_clusters. Output: seed_offset, n_clusters.
SELECT DISTINCT seed_offset, n_clusters
FROM evaluator_clusters
ORDER BY seed_offset, n_clusters
