-- The proposal mechanisms of a proposals table that names its producer but no source (the reference
-- study's frozen heads: the trace file and its SHA-256), with the images proposed for. Input: proposals.
SELECT mechanism, CAST(NULL AS VARCHAR) AS source, 0 AS sources, min(producer) AS producer,
       min(producer_sha256) AS producer_sha256, count(*) AS images
FROM proposals
GROUP BY mechanism
ORDER BY mechanism
