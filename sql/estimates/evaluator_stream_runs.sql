-- Twin: estimates/portable_evaluator_streams.sql (every other engine). Differs: runs in row order with the
-- analysis and metric, so the in-process path slices the fetched numbers; there, one row per stream.
-- The streams of the `evaluator` scheme in the row order of evaluator_clusters (analysis, metric, rank):
-- one row per analysis and metric with its seed offset and cluster count (its run of rows). Lets the
-- caller fetch only the numbers of evaluator_clusters. Input: evaluator_clusters.
SELECT analysis, metric, any_value(seed_offset) AS seed_offset, any_value(n_clusters) AS n_clusters
FROM evaluator_clusters
GROUP BY analysis, metric
ORDER BY analysis, metric
