-- The cluster counts (G) of the analyses of cluster_stats, one row each: the sizes of the numpy
-- streams to draw and of the point's weights, without bringing every cluster's statistics back
-- from another engine. Input: cluster_stats. Portable.
SELECT DISTINCT n_clusters FROM cluster_stats
