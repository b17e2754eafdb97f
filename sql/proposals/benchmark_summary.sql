-- The demo's benchmark table: accuracy per model (the mechanisms that propose with it named together:
-- they share its answers), over every item, per axis and per task, with the whole-cluster interval.
-- Input: benchmark (catalog view).
SELECT
    model,
    string_agg(DISTINCT mechanism, ', ' ORDER BY mechanism) AS mechanisms,
    scope,
    coalesce(axis, '') AS axis,
    coalesce(task, '') AS task,
    any_value(n_items) AS items,
    any_value(n_clusters) AS clusters,
    printf('%.3f [%.3f, %.3f]', any_value(accuracy), any_value(ci_lower), any_value(ci_upper)) AS "accuracy [95% CI]"
FROM benchmark
WHERE available
GROUP BY model, model_revision, scope, axis, task
ORDER BY model, CASE scope WHEN 'all' THEN 0 WHEN 'axis' THEN 1 ELSE 2 END, axis, task
