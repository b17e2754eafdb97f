-- What the records evaluate: per analysis, the images and clusters, and the split they come from.
-- Input: records, clusters.
SELECT r.analysis, coalesce(c.split, 'unknown') AS split, count(*) AS images,
       count(DISTINCT r.cluster_id) AS clusters
FROM records r
LEFT JOIN clusters c ON c.image_id = r.case_id
GROUP BY ALL
ORDER BY r.analysis, split
