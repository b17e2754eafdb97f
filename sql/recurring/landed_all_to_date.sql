-- Every landed case of one pool to date as one log: case ids are qualified by the landed file's
-- content key (two files may reuse an id, and two files may share a name); cluster ids are qualified by
-- the site (two sites that reuse an id hold two lesions, also pooled over sites), so a lesion seen in
-- several periods stays one cluster.
-- Input: landed_pooled (sql/recurring/landed_pooled.sql); parameters $pool, $period (NULL = all periods), $site and
-- $model_version (NULL = every one).
SELECT
    landed_key || '/' || case_id AS case_id,
    site || '/' || cluster_id AS cluster_id,
    proposed_action,
    executed_action,
    utility_executed_local,
    utility_proposed_local,
    utility_proposed_global
FROM landed_pooled
WHERE pool = $pool AND ($period IS NULL OR period = $period)
  AND ($site IS NULL OR site = $site) AND ($model_version IS NULL OR model_version = $model_version)
ORDER BY landed_file, landed_key, row_index
