-- The case mix of each site and dimension at its latest period: whether the sequential test shows a
-- shift against the baseline, its anytime p-value, since when it shows one, and each category's share
-- against its baseline share. Input: monitor_case_mix.
WITH latest AS (
    SELECT site, dimension, max(look) AS look,
           min(CASE WHEN shifted THEN period END) AS shifted_since
    FROM monitor_case_mix
    GROUP BY site, dimension
)
SELECT
    c.site,
    c.dimension,
    any_value(c.period) AS period,
    c.look,
    bool_or(c.shifted) AS shifted,
    any_value(c.p_value) AS p_value,
    any_value(l.shifted_since) AS shifted_since,
    string_agg(c.category || ' ' || coalesce(printf('%.1f%%', 100 * c.baseline_share), 'NA') || ' to '
               || coalesce(printf('%.1f%%', 100 * c.share), 'NA'), '; ' ORDER BY c.category) AS shares,
    any_value(c.reason) AS reason
FROM monitor_case_mix AS c
JOIN latest AS l ON l.site = c.site AND l.dimension = c.dimension AND l.look = c.look
GROUP BY c.site, c.dimension, c.look
ORDER BY c.site, c.dimension
