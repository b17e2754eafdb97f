-- What a raw-path build produced, for the demo's printout. Input: images, image_hashes, duplicates,
-- clusters, ingest_report.
SELECT 'images' AS what, CAST(count(*) AS VARCHAR) AS value FROM images
UNION ALL SELECT 'images by risk stratum', string_agg(r || ' ' || n, ', ' ORDER BY r)
    FROM (SELECT coalesce(risk_stratum, '?') AS r, count(*) AS n FROM images GROUP BY 1)
UNION ALL SELECT 'hashes by kind', string_agg(k || ' ' || n, ', ' ORDER BY k)
    FROM (SELECT hash_kind AS k, count(*) AS n FROM image_hashes GROUP BY 1)
UNION ALL SELECT 'exact-hash groups (images)',
    count(DISTINCT component_id) || ' (' || count(*) || ')' FROM duplicates WHERE threshold = 0
UNION ALL SELECT 'near-duplicate components, threshold 4 (images)',
    count(DISTINCT component_id) || ' (' || count(*) || ')' FROM duplicates WHERE threshold = 4
UNION ALL SELECT 'clusters', CAST(count(DISTINCT cluster_id) AS VARCHAR) FROM clusters
UNION ALL SELECT 'clusters with more than one image',
    CAST(count(*) AS VARCHAR) FROM (SELECT cluster_id FROM clusters GROUP BY 1 HAVING count(*) > 1)
UNION ALL SELECT 'split (images / clusters)', string_agg(s || ' ' || n || ' / ' || c, ', ' ORDER BY s)
    FROM (SELECT split AS s, count(*) AS n, count(DISTINCT cluster_id) AS c FROM clusters GROUP BY 1)
UNION ALL SELECT 'ingest report', coalesce(string_agg(reason || ' ' || n, ', ' ORDER BY reason), 'nothing to report')
    FROM (SELECT reason, count(*) AS n FROM ingest_report GROUP BY 1)
