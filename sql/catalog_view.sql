-- One catalog view over a lake table's Parquet file(s), relative to the lake folder so that a lake can
-- be copied, moved or archived whole. The lake root comes from the session variable `autheval_lake`
-- (set by warehouse.catalog.connect_readonly); unset, the path is relative to the working directory
-- (or DuckDB's file_search_path). {table} and {location} are filled by warehouse/catalog.py with a
-- checked identifier and a quoted relative path literal (DDL takes no parameters).
CREATE OR REPLACE VIEW {table} AS
SELECT * FROM read_parquet(coalesce(getvariable('autheval_lake') || '/', '') || {location}, union_by_name = true)
