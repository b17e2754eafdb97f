-- What a validated raw record supports: counts that decide its record level and mode. n_clusters is
-- HyperLogLog's estimate (bounded memory at any size; an exact distinct count of 10^7 clusters ran out
-- of DuckDB's 1.4 GiB here): it sizes the partitions of records/cluster_sums.sql, whose rows give the exact count.
-- Input: raw_records (validated).
SELECT
    count(*) AS n_cases,
    approx_count_distinct(CAST(cluster_id AS VARCHAR)) AS n_clusters,
    count(*) FILTER (WHERE CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR))
        AS n_changed,
    count(*) FILTER (WHERE CAST(proposed_action AS VARCHAR) <> CAST(executed_action AS VARCHAR)
                       AND utility_proposed_local IS NOT NULL) AS n_changed_with_local,
    count(utility_proposed_local) AS n_with_local,
    count(utility_proposed_global) AS n_with_global,
    count(executed_action) AS n_with_executed
FROM raw_records
