-- Asset check: what is shared by a cluster is constant within it (split, and the risk stratum where
-- known: no cluster mixes reference states). Input: clusters, images.
SELECT count(*) AS violations, min(cluster_id) AS example
FROM (
    SELECT c.cluster_id
    FROM clusters AS c
    JOIN images AS i USING (image_id)
    GROUP BY c.cluster_id
    HAVING count(DISTINCT c.split) > 1 OR count(DISTINCT i.risk_stratum) > 1
)
