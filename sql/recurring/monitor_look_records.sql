-- The landed cases of one slice up to one look as one log: a site x model version ($site,
-- $model_version; NULL = every one) with period <= $period. Case ids are qualified by the landed file's
-- content key (two files may reuse an id); cluster ids are qualified by the site (two sites that reuse
-- an id hold two lesions, also in a slice pooled over sites), so a lesion seen in several periods stays
-- one cluster and one site's lesion is never another's. Input: landed_records (with site, model_version, period).
SELECT
    landed_key || '/' || case_id AS case_id,
    site || '/' || cluster_id AS cluster_id,
    proposed_action,
    executed_action,
    utility_executed_local,
    utility_proposed_local,
    utility_proposed_global
FROM landed_records
WHERE ($site IS NULL OR site = $site)
  AND ($model_version IS NULL OR model_version = $model_version)
  AND period <= $period
ORDER BY landed_file, landed_key, row_index
