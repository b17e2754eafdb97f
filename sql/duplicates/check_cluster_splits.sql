-- Asset check: no cluster crosses a split. Input: clusters.
SELECT count(*) AS violations, min(cluster_id) AS example
FROM (SELECT cluster_id FROM clusters GROUP BY cluster_id HAVING count(DISTINCT split) > 1)
