-- Drop a stage's table before it is rebuilt on the same connection. {table} is filled by
-- autheval/review/local_review.py with a checked, quoted identifier (DDL takes no parameters).
DROP TABLE IF EXISTS {table}
