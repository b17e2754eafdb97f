-- Bounds that hold for every analysis: each rule of cs_bounds_any(rule, unit, metric, lower, upper)
-- for each analysis of monitor_cs (sql/recurring/monitor_cs.sql). Output: cs_bounds' layout
-- (sql/recurring/monitor_cs_pvalues.sql): analysis, rule, unit, metric, lower, upper.
SELECT a.analysis, b.rule, b.unit, b.metric, b.lower, b.upper
FROM (SELECT DISTINCT analysis FROM monitor_cs) AS a
CROSS JOIN cs_bounds_any AS b
ORDER BY a.analysis, b.rule
