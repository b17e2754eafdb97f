-- Check: every selection has a non-empty admissible band and a selected action (AuthEval spec 3.8:
-- a still-empty band is a hard error). Counts the selection rows whose band is NULL (no context, or
-- a context value the rules need is missing) or empty, or whose a_sel is NULL, with one example.
-- Input: selections. Returns one row.
SELECT
    count(*) FILTER (WHERE band_mask IS NULL OR band_mask = 0 OR a_sel IS NULL) AS violations,
    count(*) AS rows_checked,
    min(analysis || ': ' || image_id) FILTER (WHERE band_mask IS NULL OR band_mask = 0 OR a_sel IS NULL)
        AS example
FROM selections
