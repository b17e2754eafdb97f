-- Near-duplicate components by hash and declared threshold, their use (report, cluster, drop), and the
-- components that cross a split. Input: duplicate_report.
SELECT hash_kind, threshold, use, count(DISTINCT component_id) AS components, count(*) AS images,
       count(DISTINCT component_id) FILTER (WHERE component_crosses_split) AS crossing_components
FROM duplicate_report
GROUP BY hash_kind, threshold, use
ORDER BY hash_kind, threshold, use
