-- The demo's fairness table: per analysis and grouping, the groups compared and min/max group
-- accuracy of the proposal and of the selected action. Input: fairness (catalog view). The skin tone
-- estimated from the pixels is labelled as the estimate it is.
SELECT analysis,
       CASE WHEN grouping = 'ita_category' THEN 'ita_category (estimated)' ELSE grouping END AS grouping,
       n_groups, worst_group_proposal, fairness_proposal, worst_group_selected,
       fairness_selected
FROM fairness
ORDER BY analysis, grouping
