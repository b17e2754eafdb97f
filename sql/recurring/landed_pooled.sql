-- Every landed case with the pool it is evaluated in: landed logs can be pooled only when they are
-- the same record level (a full-counterfactual log carries the proposal's local score on its changed
-- rows, a role-separated one does not) and all or none of them give the proposal's global score.
-- Input: landed_records (one row per landed case, with landed_key and record_level per landed file).
-- Output: landed_records' columns plus pool ('<record level>' or '<record level>+global').
WITH pools AS (
    SELECT
        landed_key,
        any_value(record_level)
            || CASE WHEN count(utility_proposed_global) > 0 THEN '+global' ELSE '' END AS pool
    FROM landed_records
    GROUP BY landed_key
)
SELECT landed_records.*, pools.pool
FROM landed_records
JOIN pools USING (landed_key)
