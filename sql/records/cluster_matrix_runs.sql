-- The analyses of cluster_matrix as runs of its matrix rows (analysis order, each run its
-- cluster count long), so the caller fetches only the matrix's numbers. Input: cluster_matrix.
SELECT analysis, any_value(n_clusters) AS n_clusters
FROM cluster_matrix
GROUP BY analysis
ORDER BY analysis
