-- A record dataset of Parquet files, read where it lies: every column as the files give it, beside
-- _autheval_row, the row's row_index ((file number << 40) + its row within the file, 0-based, file
-- number in name order: a single file's rows are 0, 1, ...; records/records_validate.sql reports the
-- smallest, so the first broken row in file order). A view: every query scans the files again,
-- streaming, within DuckDB's memory limit. {view} is a checked identifier and {files} a list of
-- quoted path literals, filled by autheval/records/datasets.py (DDL takes no parameters). DuckDB-only
-- (file_index, file_row_number); Spark reads the same files itself (warehouse/engine.py).
CREATE OR REPLACE TEMP VIEW {view} AS
SELECT (CAST(file_index AS BIGINT) << 40) + CAST(file_row_number AS BIGINT) AS _autheval_row, *
FROM read_parquet({files})
