-- The pools of the trend and the reporting periods each one has data in, in order.
-- Input: landed_pooled (sql/landed_pooled.sql).
SELECT DISTINCT pool, period
FROM landed_pooled
ORDER BY pool, period
