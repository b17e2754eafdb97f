-- Landed partitions of few rows in all, read once: landed_source as a DuckDB table of landed_files
-- (recurring/landed_source_files.sql), in their order, so that each query of the monitor or the trend
-- does not open every file again (autheval.monitoring.landing.landed_view).
CREATE OR REPLACE TEMP TABLE landed_source AS
SELECT * FROM landed_files
