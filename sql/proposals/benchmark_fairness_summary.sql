-- The demo's benchmark fairness table: per model and grouping, over every item, the groups compared
-- and min/max group accuracy. Input: benchmark_fairness (catalog view).
SELECT
    model,
    string_agg(DISTINCT mechanism, ', ' ORDER BY mechanism) AS mechanisms,
    grouping,
    any_value(n_groups) AS n_groups,
    any_value(worst_group) AS worst_group,
    any_value(best_group) AS best_group,
    any_value(fairness_ratio) AS fairness_ratio,
    any_value(smallest_group_items) AS smallest_group_items
FROM benchmark_fairness
WHERE task IS NULL
GROUP BY model, grouping
ORDER BY model, grouping
