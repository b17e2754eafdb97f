-- One catalog view over a lake table's Parquet file(s) in one snapshot, named relative to the lake
-- folder so that a lake can be copied, moved or archived whole. The lake root comes from the session
-- variable `autheval_lake` (set by warehouse.catalog.connect_readonly); unset, the paths are relative to
-- the working directory (or DuckDB's file_search_path). {table} and {locations} are filled by
-- warehouse/catalog_build.py (warehouse.sql.fill) with a checked identifier and a list of quoted relative path literals (DDL takes
-- no parameters).
CREATE OR REPLACE VIEW {table} AS
SELECT * FROM read_parquet(
    list_transform({locations}, f -> coalesce(getvariable('autheval_lake') || '/', '') || f),
    union_by_name = true)
