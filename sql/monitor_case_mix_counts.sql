-- The case mix of each site and period: cases per category of each dimension, the site's periods
-- numbered as its looks. Dimensions: proposed_action (the proposer's risk stratum: its action level),
-- risk_stratum (only at a site whose logs carry one; a case without one is 'unspecified'),
-- workflow_profile (changed: the service replaced the proposal; accepted; no_selection: a
-- proposal-only record) and record_level (of the landed file).
-- Input: landed_records (with site, period, risk_stratum). Output: site, period, look, dimension,
-- category, count.
WITH looks AS (
    SELECT site, period, CAST(row_number() OVER (PARTITION BY site ORDER BY period) AS BIGINT) AS look
    FROM (SELECT DISTINCT site, period FROM landed_records)
),
stratified AS (
    SELECT site FROM landed_records GROUP BY site HAVING count(risk_stratum) > 0
),
categories AS (
    SELECT site, period, 'proposed_action' AS dimension, coalesce(proposed_action, 'missing') AS category
    FROM landed_records
    UNION ALL
    SELECT site, period, 'risk_stratum', coalesce(risk_stratum, 'unspecified')
    FROM landed_records
    WHERE site IN (SELECT site FROM stratified)
    UNION ALL
    SELECT site, period, 'workflow_profile',
           CASE WHEN intervened IS NULL THEN 'no_selection' WHEN intervened THEN 'changed' ELSE 'accepted' END
    FROM landed_records
    UNION ALL
    SELECT site, period, 'record_level', record_level
    FROM landed_records
)
SELECT c.site, c.period, l.look, c.dimension, c.category, CAST(count(*) AS BIGINT) AS count
FROM categories AS c
JOIN looks AS l ON l.site = c.site AND l.period = c.period
GROUP BY c.site, c.period, l.look, c.dimension, c.category
ORDER BY c.site, l.look, c.dimension, c.category
