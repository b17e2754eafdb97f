-- The content keys of the landed files each look of each slice reads (a file whose first period in the
-- slice is at or before the look's), in order: with the slice and the look's period they name the
-- look's data. Input: landed_records, monitor_slices, monitor_look_sums. Output: slice, look, landed_keys.
WITH slice_files AS (
    SELECT s.slice, r.landed_key, min(r.period) AS first_period
    FROM landed_records AS r
    JOIN monitor_slices AS s
      ON (s.site = 'all' OR s.site = r.site) AND (s.model_version = 'all' OR s.model_version = r.model_version)
    GROUP BY s.slice, r.landed_key
)
SELECT l.slice, l.look, list(f.landed_key ORDER BY f.landed_key) AS landed_keys
FROM monitor_look_sums AS l
JOIN slice_files AS f ON f.slice = l.slice AND f.first_period <= l.period
GROUP BY l.slice, l.look
ORDER BY l.slice, l.look
