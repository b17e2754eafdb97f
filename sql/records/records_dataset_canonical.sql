-- The canonical record of a dataset, row for row: the analysis label, row_index, the id and action
-- columns as text and the typed part ({typed}: records/records_typed_columns.sql, the expressions
-- records/records_normalize.sql uses for records held in memory). {raw} is a checked identifier filled
-- by autheval/records/registration.py: the validated raw_records layout of one dataset. Portable: Spark
-- runs it over the files it reads itself (autheval/estimation/engine_estimates.py).
SELECT
    analysis,
    row_index,
    CAST(case_id AS VARCHAR) AS case_id,
    CAST(cluster_id AS VARCHAR) AS cluster_id,
    CAST(proposed_action AS VARCHAR) AS proposed_action,
    CAST(executed_action AS VARCHAR) AS executed_action,
{typed}
FROM {raw}
