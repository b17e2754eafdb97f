-- One row per (study, analysis, mechanism, regime) of the lake's `records` (a view over its Parquet
-- files, sql/records/records_dataset_parquet.sql): what the estimate assets need to name and group the
-- analyses, without holding a record in this process. Input: records.
SELECT study, analysis, mechanism, regime
FROM records
GROUP BY study, analysis, mechanism, regime
ORDER BY min(_autheval_row)
