-- Per (analysis, grouping, group): size, and accuracy and balanced accuracy of the proposal and of the
-- selected action against the reference level (exact match of the action level; balanced accuracy =
-- mean recall over the reference levels present in the group).
-- Input: subgroup_members (sql/estimates/subgroup_members.sql).
WITH levelled AS (
    SELECT
        *,
        CAST(substr(proposed_action, 2) AS INTEGER) = reference_level AS proposal_hit,
        CAST(substr(executed_action, 2) AS INTEGER) = reference_level AS selected_hit
    FROM subgroup_members
    WHERE reference_level IS NOT NULL
),
per_level AS (
    SELECT analysis, grouping, group_value, reference_level,
           avg(CAST(proposal_hit AS DOUBLE)) AS proposal_recall,
           avg(CAST(selected_hit AS DOUBLE)) AS selected_recall
    FROM levelled
    GROUP BY ALL
),
-- summed in level order (a list), not by a parallel avg: the same inputs give the same last bit
balanced AS (
    SELECT analysis, grouping, group_value,
           list_sum(list(proposal_recall ORDER BY reference_level)) / count(*) AS balanced_accuracy_proposal,
           list_sum(list(selected_recall ORDER BY reference_level)) / count(*) AS balanced_accuracy_selected
    FROM per_level
    GROUP BY ALL
),
sizes AS (
    SELECT analysis, grouping, group_value,
           count(*) AS n_images, count(DISTINCT cluster_id) AS n_clusters,
           count(reference_level) AS n_with_reference
    FROM subgroup_members
    GROUP BY ALL
),
accuracy AS (
    SELECT analysis, grouping, group_value,
           avg(CAST(proposal_hit AS DOUBLE)) AS accuracy_proposal,
           avg(CAST(selected_hit AS DOUBLE)) AS accuracy_selected
    FROM levelled
    GROUP BY ALL
)
SELECT
    s.analysis, s.grouping, s.group_value, s.n_images, s.n_clusters, s.n_with_reference,
    a.accuracy_proposal, b.balanced_accuracy_proposal, a.accuracy_selected, b.balanced_accuracy_selected
FROM sizes AS s
LEFT JOIN accuracy AS a USING (analysis, grouping, group_value)
LEFT JOIN balanced AS b USING (analysis, grouping, group_value)
ORDER BY s.analysis, s.grouping, s.group_value
