-- The catalog's views as DuckDB stores them (`CREATE VIEW name AS SELECT ...`): the read-only query
-- connection (warehouse.catalog.connect_readonly) allows exactly the files these views read.
SELECT sql FROM duckdb_views() WHERE NOT internal AND NOT temporary ORDER BY view_name
