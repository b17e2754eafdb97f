-- Rule 2 of records/records_validate.sql on the ids themselves (run only when a 64-bit hash of the ids
-- repeats): rows whose case_id appears more than once, the first such row and its id.
-- Input: raw_records. Output: n_rows (0 when the repeated hash was two different ids), row_index, case_id.
WITH duplicates AS (
    SELECT CAST(case_id AS VARCHAR) AS case_id, min(row_index) AS first_row, count(*) AS n
    FROM raw_records
    WHERE case_id IS NOT NULL
    GROUP BY CAST(case_id AS VARCHAR)
    HAVING count(*) > 1
)
SELECT coalesce(sum(n), 0) AS n_rows, min(first_row) AS row_index, arg_min(case_id, first_row) AS case_id
FROM duplicates
