-- Which group each fairness bootstrap row is: per analysis and group_index, the compared group's
-- grouping and value (sql/estimates/fairness_cluster_stats.sql numbers them).
-- Input: fairness_cluster_stats. Output: analysis, group_index, grouping, group_value.
SELECT DISTINCT analysis, group_index, grouping, group_value
FROM fairness_cluster_stats
ORDER BY analysis, group_index
