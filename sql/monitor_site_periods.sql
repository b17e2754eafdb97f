-- Every site and period of the landed records (with deployment columns), in order.
SELECT DISTINCT site, period FROM landed_records ORDER BY site, period
