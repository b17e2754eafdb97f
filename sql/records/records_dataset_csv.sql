-- A CSV record file read where it lies: every cell as text (so a bad value can be named, not
-- coerced), the columns by position (c0, c1, ...: autheval/records/datasets.py reads and checks the header
-- itself and maps names to positions), empty cells NULL (quoted ones too), beside _autheval_row (its
-- 0-based row in the file: a streaming row_number over the reader's order). A view: every query
-- scans the file again, streaming. {view} is a checked identifier, {files} a list of one quoted path
-- literal, {columns} the struct of the positional names, {delimiter} a quoted literal (DDL takes no
-- parameters). DuckDB-only.
CREATE OR REPLACE TEMP VIEW {view} AS
SELECT row_number() OVER () - 1 AS _autheval_row, *
FROM read_csv({files}, header = true, auto_detect = false, columns = {columns}, delim = {delimiter},
              quote = '"', escape = '"', allow_quoted_nulls = true, null_padding = false)
