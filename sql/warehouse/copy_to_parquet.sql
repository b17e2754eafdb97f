-- Stream the result of one of the project's SQL files to a Parquet file without holding it in memory
-- (a relation with bound parameters is materialized first; COPY is not). warehouse.sql.to_parquet fills the
-- query placeholder with the text of a file from sql/ (loaded by name) and the path placeholder with a
-- quoted literal (COPY's target takes no parameters); the query's own parameters stay bound.
COPY (
{query}
) TO {path} (FORMAT parquet)
