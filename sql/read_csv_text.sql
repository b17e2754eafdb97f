-- A CSV file with every column read as text, so a bad value can be named rather than coerced.
-- Parameter $1: the file path.
SELECT * FROM read_csv($1, all_varchar = true, header = true)
