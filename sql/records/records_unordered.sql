-- Checking a Parquet dataset's rules needs no row order (its row_index comes from the files' own row
-- numbers): letting DuckDB drop insertion order lets its scans and aggregates use less memory
-- (DuckDB's own advice for large reads; measured here, 10^8 records: records/records_validate.sql within a
-- 1 GB limit, 1.15 GB resident in all). Undone by records/records_ordered.sql (a CSV's streaming row number
-- needs the order).
SET preserve_insertion_order = false
