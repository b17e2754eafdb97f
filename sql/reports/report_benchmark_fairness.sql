-- The benchmark's fairness as the report shows it: per mechanism, task and grouping of the file's
-- `group` column, the worst and best group and the ratio of their accuracies. Input: benchmark_fairness.
SELECT mechanism, model, task, grouping, n_groups, worst_group, best_group, min_accuracy, max_accuracy,
       fairness_ratio
FROM benchmark_fairness
ORDER BY mechanism, task NULLS FIRST, grouping
