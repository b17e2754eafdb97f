-- The clusters behind each analysis's numbers, for the small-sample rules (autheval/estimation/exact.py):
-- all its clusters, and those with at least one changed action (the only clusters that carry the gap
-- metrics Delta_authority and delta: the gap is 0 on an unchanged case). Portable as written (it runs on
-- the in-process DuckDB over cluster_stats, or on another engine over its own cluster_stats).
-- Input: cluster_stats. Output: analysis, n_clusters, changed_clusters.
SELECT
    analysis,
    CAST(count(*) AS BIGINT) AS n_clusters,
    CAST(sum(CASE WHEN sum_changed > 0 THEN 1 ELSE 0 END) AS BIGINT) AS changed_clusters
FROM cluster_stats
GROUP BY analysis
ORDER BY analysis
