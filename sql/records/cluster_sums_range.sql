-- The per-cluster sums ({sums}: records/cluster_sums.sql) of the clusters whose id lies in [$lower, $upper)
-- (byte order; NULL: no bound), in id order: one range of a large record's clusters
-- (autheval/records/cluster_stats.py). A range, not a hash of the id: DuckDB skips the Parquet row groups
-- whose id statistics lie outside it (a log written in cluster order is read about once over all ranges,
-- not once per range), and the ranges in order give the clusters ranked, with no sort of every id.
-- Input: records_in_ranges (the canonical record, records/records_normalize.sql's columns).
WITH records AS (
    SELECT *
    FROM records_in_ranges
    WHERE ($lower IS NULL OR cluster_id >= $lower) AND ($upper IS NULL OR cluster_id < $upper)
)
SELECT *
FROM (
{sums}
) AS sums
ORDER BY analysis, cluster_id
