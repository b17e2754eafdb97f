-- A site's cluster counts per analysis, for the export's disclosure control (autheval/sites/export.py):
-- clusters, and clusters with at least one changed case. Input: cluster_stats.
SELECT
    analysis,
    CAST(count(*) AS BIGINT) AS n_clusters,
    CAST(count(*) FILTER (WHERE sum_changed > 0) AS BIGINT) AS n_changed_clusters
FROM cluster_stats
GROUP BY analysis
ORDER BY analysis
