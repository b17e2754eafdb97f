-- The case mix of each site and period, one observation per lesion cluster: the cluster's first case
-- in time (its earliest period, then its landed file, then its row in the file) gives the cluster's
-- category, and the cluster is counted in that period only. The images of one lesion, and a lesion
-- seen again in a later period, are not independent draws of the mix; clusters are (the test in
-- sql/recurring/monitor_case_mix.sql needs independent observations). Dimensions: proposed_action (the
-- proposer's risk stratum: its action level), risk_stratum (only at a site whose logs carry one in its
-- first $baseline_periods periods, so that a later file does not add a test to earlier looks; a case
-- without one is 'unspecified'), workflow_profile (changed: the service replaced the proposal;
-- accepted; no_selection: a proposal-only record) and record_level (of the landed file).
-- Input: landed_records (with site, period, cluster_id, landed_file, row_index, risk_stratum).
-- Output: site, period, look, dimension, category, count (clusters first seen in that period).
WITH looks AS (
    SELECT site, period, CAST(row_number() OVER (PARTITION BY site ORDER BY period) AS BIGINT) AS look
    FROM (SELECT DISTINCT site, period FROM landed_records)
),
stratified AS (
    SELECT r.site
    FROM landed_records AS r
    JOIN looks AS l ON l.site = r.site AND l.period = r.period
    WHERE l.look <= $baseline_periods
    GROUP BY r.site
    HAVING count(r.risk_stratum) > 0
),
firsts AS (  -- each lesion cluster's first case in time
    SELECT *
    FROM landed_records
    QUALIFY row_number() OVER (PARTITION BY site, cluster_id ORDER BY period, landed_file, row_index) = 1
),
categories AS (
    SELECT site, period, 'proposed_action' AS dimension, coalesce(proposed_action, 'missing') AS category
    FROM firsts
    UNION ALL
    SELECT site, period, 'risk_stratum', coalesce(risk_stratum, 'unspecified')
    FROM firsts
    WHERE site IN (SELECT site FROM stratified)
    UNION ALL
    SELECT site, period, 'workflow_profile',
           CASE WHEN intervened IS NULL THEN 'no_selection' WHEN intervened THEN 'changed' ELSE 'accepted' END
    FROM firsts
    UNION ALL
    SELECT site, period, 'record_level', record_level
    FROM firsts
)
SELECT c.site, c.period, l.look, c.dimension, c.category, CAST(count(*) AS BIGINT) AS count
FROM categories AS c
JOIN looks AS l ON l.site = c.site AND l.period = c.period
GROUP BY c.site, c.period, l.look, c.dimension, c.category
ORDER BY c.site, l.look, c.dimension, c.category
