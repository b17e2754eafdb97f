-- Checking a Parquet dataset's rules needs no row order (its row_index comes from the files' own row
-- numbers): letting DuckDB drop insertion order lets its scans and aggregates stream in less memory
-- (10^8 records: the rule check ran out of a 1 GB limit with the order kept, and passed within it
-- without). Undone by records_ordered.sql (a CSV's streaming row number needs the order).
SET preserve_insertion_order = false
