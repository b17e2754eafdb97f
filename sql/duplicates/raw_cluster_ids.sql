-- Cluster ids (AuthEval spec 1.9.4): per connected component, the distinct base nodes sorted as
-- strings, joined with U+001F, SHA-256 of the UTF-8 bytes, first 20 hex digits: "cluster:" + hex20.
-- The id depends only on the component's base nodes, never on row order.
-- Input: cluster_members(image_id VARCHAR, comp BIGINT, base_node VARCHAR).
-- Output: image_id, base_node, cluster_id, cluster_size (images in the cluster).
WITH ids AS (
    SELECT
        comp,
        'cluster:' || left(sha256(string_agg(DISTINCT base_node, chr(31) ORDER BY base_node)), 20) AS cluster_id,
        count(*) AS cluster_size
    FROM cluster_members
    GROUP BY comp
)
SELECT m.image_id, m.base_node, i.cluster_id, i.cluster_size
FROM cluster_members AS m
JOIN ids AS i USING (comp)
ORDER BY m.image_id
