-- The images the lake holds, by source and split (an image without a cluster has no split).
-- Input: images, clusters.
SELECT i.source, coalesce(c.split, 'none') AS split, count(*) AS images
FROM images i
LEFT JOIN clusters c ON c.image_id = i.image_id
GROUP BY ALL
ORDER BY i.source, split
