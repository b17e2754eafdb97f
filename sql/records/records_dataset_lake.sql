-- One analysis of a lake table of records (the lake's `records`: every analysis in one table, its
-- Parquet files read where they lie): that analysis's rows in case_id order, as
-- records/records_of_analysis.sql gives them, beside _autheval_row, the row's place in that order (0-based),
-- so a broken rule names the row it names in the rows held (records_from_table). A view: every query
-- scans the files again, streaming. {view} is a checked identifier, {files} a list of quoted path
-- literals and {analysis} a quoted literal, filled by autheval/records/datasets.py (DDL takes no parameters).
CREATE OR REPLACE TEMP VIEW {view} AS
SELECT row_number() OVER (ORDER BY case_id) - 1 AS _autheval_row, *
FROM read_parquet({files})
WHERE analysis = {analysis}
ORDER BY case_id
