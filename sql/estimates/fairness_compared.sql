-- The groups a fairness ratio compares (DermoGPT section 3): per (analysis, grouping), the estimable
-- groups with a known value ('missing' is reported in subgroups, not compared), at least two of them,
-- and for each of the four accuracies (proposal, selected action; plain and balanced) the group that is
-- worst and the group that is best at the point estimate. Ties go to the first group by name for the
-- worst and the last for the best, so a grouping of equal groups still compares two of them.
-- The ratio's interval (sql/estimates/fairness.sql) holds this pair fixed in every replicate.
-- Input: subgroup_sizes (sql/estimates/subgroup_accuracy.sql output + estimable).
WITH compared AS (
    SELECT *, count(*) OVER (PARTITION BY analysis, grouping) AS n_groups
    FROM subgroup_sizes
    WHERE estimable AND accuracy_proposal IS NOT NULL AND group_value <> 'missing'
)
SELECT
    analysis,
    grouping,
    group_value,
    n_groups,
    accuracy_proposal,
    accuracy_selected,
    balanced_accuracy_proposal,
    balanced_accuracy_selected,
    row_number() OVER (PARTITION BY analysis, grouping ORDER BY accuracy_proposal ASC NULLS LAST, group_value ASC)
        = 1 AS worst_proposal,
    row_number() OVER (PARTITION BY analysis, grouping ORDER BY accuracy_proposal DESC NULLS LAST, group_value DESC)
        = 1 AS best_proposal,
    row_number() OVER (PARTITION BY analysis, grouping ORDER BY accuracy_selected ASC NULLS LAST, group_value ASC)
        = 1 AS worst_selected,
    row_number() OVER (PARTITION BY analysis, grouping ORDER BY accuracy_selected DESC NULLS LAST, group_value DESC)
        = 1 AS best_selected,
    row_number() OVER (
        PARTITION BY analysis, grouping ORDER BY balanced_accuracy_proposal ASC NULLS LAST, group_value ASC
    ) = 1 AS worst_balanced_proposal,
    row_number() OVER (
        PARTITION BY analysis, grouping ORDER BY balanced_accuracy_proposal DESC NULLS LAST, group_value DESC
    ) = 1 AS best_balanced_proposal,
    row_number() OVER (
        PARTITION BY analysis, grouping ORDER BY balanced_accuracy_selected ASC NULLS LAST, group_value ASC
    ) = 1 AS worst_balanced_selected,
    row_number() OVER (
        PARTITION BY analysis, grouping ORDER BY balanced_accuracy_selected DESC NULLS LAST, group_value DESC
    ) = 1 AS best_balanced_selected
FROM compared
WHERE n_groups >= 2  -- a ratio needs two groups to compare
ORDER BY analysis, grouping, group_value
