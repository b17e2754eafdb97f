-- Fairness on the benchmark (DermoBench's fairness task, DermoGPT spec section 7): per mechanism,
-- task (NULL: every item) and grouping, min group accuracy / max group accuracy (1 = every group
-- equally accurate), over the groups the file's `group` column names ("grouping=value" pairs joined by
-- ';', a bare value belonging to the grouping 'group') and the lake image's own (lake_group:
-- images.sex, images.ita_category, ...). NULL ratio when the best group's accuracy is 0;
-- a grouping needs two groups. Input: benchmark_results (every mechanism's rows).
WITH pairs AS (
    SELECT mechanism, model, item_id, cluster_id, task, correct, trim(pair) AS pair
    FROM benchmark_results,
         unnest(string_split(coalesce("group", '') || ';' || coalesce(lake_group, ''), ';')) AS t(pair)
    WHERE trim(pair) <> ''
),
labelled AS (
    SELECT
        mechanism, model, item_id, cluster_id, task, correct,
        CASE WHEN contains(pair, '=') THEN trim(split_part(pair, '=', 1)) ELSE 'group' END AS grouping,
        CASE WHEN contains(pair, '=') THEN trim(substr(pair, instr(pair, '=') + 1)) ELSE pair END AS group_value
    FROM pairs
),
scoped AS (
    SELECT mechanism, model, CAST(NULL AS VARCHAR) AS task, grouping, group_value, item_id, cluster_id, correct FROM labelled
    UNION ALL SELECT mechanism, model, task, grouping, group_value, item_id, cluster_id, correct FROM labelled
),
groups AS (
    SELECT
        mechanism, model, task, grouping, group_value,
        count(*) AS n_items,
        count(DISTINCT cluster_id) AS n_clusters,
        count(*) FILTER (WHERE correct) / count(*) AS accuracy
    FROM scoped
    GROUP BY ALL
)
SELECT
    mechanism,
    any_value(model) AS model,
    task,
    grouping,
    count(*) AS n_groups,
    string_agg(group_value || ' ' || printf('%.4f', accuracy) || ' (' || n_items || ')', '; '
               ORDER BY group_value) AS "groups",
    arg_min(group_value, (accuracy, group_value)) AS worst_group,
    arg_max(group_value, (accuracy, group_value)) AS best_group,
    min(accuracy) AS min_accuracy,
    max(accuracy) AS max_accuracy,
    min(accuracy) / nullif(max(accuracy), 0) AS fairness_ratio,
    min(n_items) AS smallest_group_items,
    min(n_clusters) AS smallest_group_clusters
FROM groups
GROUP BY mechanism, task, grouping
HAVING count(*) >= 2
ORDER BY mechanism, task NULLS FIRST, grouping
