-- The pools of the trend, the slices of each (every site and model version: 'all', 'all'; each site
-- over its versions: '<site>', 'all'; each site x model version) and the reporting periods each slice
-- has data in, in order. Input: landed_pooled (sql/recurring/landed_pooled.sql, with site and model_version).
SELECT DISTINCT pool, site, model_version, period
FROM (
    SELECT pool, 'all' AS site, 'all' AS model_version, period FROM landed_pooled
    UNION ALL
    SELECT pool, site, 'all', period FROM landed_pooled
    UNION ALL
    SELECT pool, site, model_version, period FROM landed_pooled
)
ORDER BY pool, site <> 'all', site, model_version <> 'all', model_version, period
