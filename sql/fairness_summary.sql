-- The demo's fairness table: per analysis and grouping, the groups compared and min/max group
-- accuracy of the proposal and of the selected action. Input: fairness (catalog view).
SELECT analysis, grouping, n_groups, worst_group_proposal, fairness_proposal, worst_group_selected,
       fairness_selected
FROM fairness
ORDER BY analysis, grouping
