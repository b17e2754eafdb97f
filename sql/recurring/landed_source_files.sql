-- The lake's landed partitions read where they lie, as one relation: landed_source for
-- recurring/landed_records_view.sql. Union by name: a partition landed before a column existed has it
-- NULL. {files} is a list of quoted path literals (autheval.records.datasets.path_list; DDL takes no
-- parameters).
CREATE OR REPLACE TEMP VIEW landed_source AS
SELECT * FROM read_parquet({files}, union_by_name = true)
