-- The landed cases of one slice up to one look as one log: a site x model version (monitor_look's site and
-- model_version; NULL = every one) with period <= monitor_look's period. Case ids are qualified by the
-- landed file's content key (two files may reuse an id); cluster ids are qualified by the site (two sites
-- that reuse an id hold two lesions, also in a slice pooled over sites), so a lesion seen in several periods
-- stays one cluster and one site's lesion is never another's. {row_index}: the row's number in the look's
-- log (landed file, then its row: a sort of the look), or, where only whether the record rules hold is
-- asked, its number in its landed file (no sort; the rules' verdict does not read it): see
-- autheval.monitoring.monitor.look_records. Unordered: a view of it is validated where it lies, and a
-- reader that holds the rows orders them by row_index.
-- Input: landed_records (with site, model_version, period), monitor_look (one row: site, model_version, period).
SELECT
    {row_index} AS row_index,
    r.landed_key || '/' || r.case_id AS case_id,
    r.site || '/' || r.cluster_id AS cluster_id,
    r.proposed_action,
    r.executed_action,
    r.utility_executed_local,
    r.utility_proposed_local,
    r.utility_proposed_global
FROM landed_records AS r
JOIN monitor_look AS f
  ON (f.site IS NULL OR r.site = f.site)
 AND (f.model_version IS NULL OR r.model_version = f.model_version)
 AND r.period <= f.period
