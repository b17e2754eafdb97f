-- Insertion order kept again (DuckDB's default) after a Parquet dataset's rule check
-- (records/records_unordered.sql), for whatever the connection reads next.
RESET preserve_insertion_order
