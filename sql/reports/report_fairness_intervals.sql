-- Fairness per analysis and grouping with each ratio's interval (a fairness table that carries
-- fairness_<role>_ci_lower/_ci_upper, the best group of each ratio, the reason a ratio is not estimable
-- and how its interval was made); report_fairness.sql is the form without. Input: fairness.
SELECT analysis, grouping, n_groups, worst_group_proposal, best_group_proposal, min_accuracy_proposal,
       max_accuracy_proposal, fairness_proposal, fairness_proposal_ci_lower, fairness_proposal_ci_upper,
       worst_group_selected, best_group_selected, min_accuracy_selected, max_accuracy_selected,
       fairness_selected, fairness_selected_ci_lower, fairness_selected_ci_upper, reason, unit,
       interval_method, scheme, seed, reps
FROM fairness
ORDER BY analysis, grouping
