-- The looks of a monitored deployment: every slice of the landed records, with its periods in order
-- (look 1, 2, ...: look k uses the slice's data with period <= its k-th period). Slices: each site x
-- model version; each site to date over its model versions (model_version 'all'); every site
-- ('all', 'all'). `cells`: the site x model version cells a slice holds (a slice of one cell holds the
-- same data as that cell).
-- Input: landed_records (with site, model_version, period). Output: site, model_version, cells, look,
-- period.
WITH cells AS (
    SELECT DISTINCT site, model_version, period FROM landed_records
),
slices AS (
    SELECT site, model_version, period, 1 AS cells FROM (SELECT DISTINCT site, model_version, period FROM cells)
    UNION ALL
    SELECT site, 'all', period, NULL FROM (SELECT DISTINCT site, period FROM cells)
    UNION ALL
    SELECT 'all', 'all', period, NULL FROM (SELECT DISTINCT period FROM cells)
),
counted AS (
    SELECT
        s.site,
        s.model_version,
        s.period,
        coalesce(s.cells, (SELECT count(*) FROM (SELECT DISTINCT c.site, c.model_version FROM cells AS c
                                                 WHERE (s.site = 'all' OR c.site = s.site)))) AS cells
    FROM slices AS s
)
SELECT
    site,
    model_version,
    CAST(cells AS BIGINT) AS cells,
    CAST(row_number() OVER (PARTITION BY site, model_version ORDER BY period) AS BIGINT) AS look,
    period
FROM counted
ORDER BY site = 'all', site, model_version = 'all', model_version, look
