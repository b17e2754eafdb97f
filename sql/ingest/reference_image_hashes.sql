-- image_hashes of the reference study: the AuthEval pHashes the package publishes (the images of its
-- threshold-4 report, which include every exact-hash group). Input: phash_report.
SELECT
    image_id,
    'autheval' AS hash_kind,
    CAST(('0x' || image_hash) AS UBIGINT) AS phash,
    image_hash,
    image_path AS path,
    CAST(NULL AS BIGINT) AS size,
    CAST(NULL AS BIGINT) AS mtime_ns,
    CAST(NULL AS VARCHAR) AS format  -- no file was read: the hashes are the published ones
FROM phash_report
ORDER BY image_id
