-- A Parquet file as it is. Parameter $1: the file path.
SELECT * FROM read_parquet($1)
