-- The subgroups table: every (analysis, grouping, group) with its size, accuracies and whether it is
-- estimable, and for an estimable group every estimator row (unit, metric, estimate, interval,
-- availability) of its whole-cluster bootstrap within the group. A group below the declared minimum
-- keeps one row with its reason and no numbers.
-- Input: subgroup_sizes, subgroup_labels(label, analysis, grouping, group_value), subgroup_estimates
--        (the estimates of the record set named `label`).
SELECT
    g.analysis, g.grouping, g.group_value, g.n_images, g.n_clusters, g.estimable,
    coalesce(g.reason, e.reason) AS reason,
    g.accuracy_proposal, g.balanced_accuracy_proposal, g.accuracy_selected, g.balanced_accuracy_selected,
    e.unit, e.metric, e.estimate, e.ci_lower, e.ci_upper, e.p_value, e.available, e.status,
    e.scheme, e.reps, e.seed, e.record_level, e.data_sha256
FROM subgroup_sizes AS g
LEFT JOIN subgroup_labels AS l USING (analysis, grouping, group_value)
LEFT JOIN subgroup_estimates AS e ON e.analysis = l.label
ORDER BY g.analysis, g.grouping, g.group_value, e.unit, e.metric
