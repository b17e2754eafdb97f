-- The lake's landed partitions read where they lie, as one relation: the view {view} (landed_source for
-- recurring/landed_given_view.sql, or landed_files that recurring/landed_source_held.sql reads once).
-- Union by name: a partition landed before a column existed has it NULL. {files} is a list of quoted
-- path literals (autheval.records.datasets.path_list; DDL takes no parameters).
CREATE OR REPLACE TEMP VIEW {view} AS
SELECT * FROM read_parquet({files}, union_by_name = true)
