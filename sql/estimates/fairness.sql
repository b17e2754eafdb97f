-- Fairness across groups (DermoGPT section 3): per (analysis, grouping), the ratio min/max of group
-- accuracy for the proposal and for the selected action (1 = equal accuracy in every group), over the
-- estimable groups with a known value only ('missing' is reported in subgroups, not compared); balanced
-- accuracy the same way. NULL when no group is estimable or the best
-- group's accuracy is 0.
-- Input: subgroup_sizes (sql/estimates/subgroup_accuracy.sql output + estimable).
SELECT
    analysis,
    grouping,
    count(*) AS n_groups,
    arg_min(group_value, accuracy_proposal) AS worst_group_proposal,
    min(accuracy_proposal) AS min_accuracy_proposal,
    max(accuracy_proposal) AS max_accuracy_proposal,
    min(accuracy_proposal) / nullif(max(accuracy_proposal), 0) AS fairness_proposal,
    arg_min(group_value, accuracy_selected) AS worst_group_selected,
    min(accuracy_selected) AS min_accuracy_selected,
    max(accuracy_selected) AS max_accuracy_selected,
    min(accuracy_selected) / nullif(max(accuracy_selected), 0) AS fairness_selected,
    min(balanced_accuracy_proposal) / nullif(max(balanced_accuracy_proposal), 0) AS balanced_fairness_proposal,
    min(balanced_accuracy_selected) / nullif(max(balanced_accuracy_selected), 0) AS balanced_fairness_selected
FROM subgroup_sizes
WHERE estimable AND accuracy_proposal IS NOT NULL AND group_value <> 'missing'
GROUP BY ALL
HAVING count(*) >= 2  -- a ratio needs two groups to compare
ORDER BY analysis, grouping
