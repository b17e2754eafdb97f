-- What a validated raw record supports: counts that decide its record level and mode.
-- The clusters are counted by a GROUP BY (which DuckDB spills past its memory limit), not by
-- count(DISTINCT ...), whose table does not spill: at 10^7 clusters (10^8 records) it ran out of a
-- 1 GB limit. Input: raw_records (validated: no cluster_id is NULL).
WITH clusters AS (
    SELECT count(*) AS n_clusters
    FROM (SELECT CAST(cluster_id AS VARCHAR) AS cluster_id FROM raw_records WHERE cluster_id IS NOT NULL GROUP BY 1)
)
SELECT
    count(*) AS n_cases,
    any_value(c.n_clusters) AS n_clusters,
    count(*) FILTER (WHERE CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR))
        AS n_changed,
    count(*) FILTER (WHERE CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR)
                       AND utility_proposed_local IS NOT NULL) AS n_changed_with_local,
    count(utility_proposed_local) AS n_with_local,
    count(utility_proposed_global) AS n_with_global,
    count(executed_action) AS n_with_executed
FROM raw_records
CROSS JOIN clusters AS c
