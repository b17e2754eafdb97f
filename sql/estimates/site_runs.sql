-- The `poisson_by_site` scheme's sites (autheval/estimation/by_site.py): per analysis, each site's clusters
-- as one run of cluster ranks, the site being the cluster_id's part before its first ':' (ids namespaced
-- '<site>:<id>'). Ids sharing a prefix are neighbours in byte order, so each site's ranks are one run and
-- a cluster's rank within its site is its rank minus first_rank, its rank in that site's own record.
-- `unsited`: clusters whose id has no site before a ':' (refused by the caller), `example` one of them;
-- `empty_id`: a cluster id with nothing after its site's ':' (refused by the caller).
-- Input: cluster_stats. DuckDB-only (the scheme runs in process).
SELECT
    analysis,
    CASE WHEN position(':' IN cluster_id) > 1 THEN split_part(cluster_id, ':', 1) END AS site,
    CAST(min(cluster_rank) AS BIGINT) AS first_rank,
    CAST(max(cluster_rank) AS BIGINT) AS last_rank,
    CAST(count(*) AS BIGINT) AS n_clusters,
    min(cluster_id) AS example,
    min(cluster_id) FILTER (WHERE length(cluster_id) = position(':' IN cluster_id)) AS empty_id
FROM cluster_stats
GROUP BY analysis, site
ORDER BY analysis, first_rank
