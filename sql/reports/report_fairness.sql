-- Fairness per analysis and grouping: the worst group and the min/max group accuracy of the proposal
-- and of the selected action, and their ratios. Input: fairness.
SELECT analysis, grouping, n_groups, worst_group_proposal, min_accuracy_proposal, max_accuracy_proposal,
       fairness_proposal, worst_group_selected, min_accuracy_selected, max_accuracy_selected,
       fairness_selected
FROM fairness
ORDER BY analysis, grouping
