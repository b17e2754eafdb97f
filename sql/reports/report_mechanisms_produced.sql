-- The proposal mechanisms, where each came from ('file', 'model', ...) and what produced it (the trace
-- file, proposals file or model directory, with its SHA-256), with the images proposed for.
-- Input: proposals.
SELECT mechanism, min(source) AS source, count(DISTINCT source) AS sources, min(producer) AS producer,
       min(producer_sha256) AS producer_sha256, count(*) AS images
FROM proposals
GROUP BY mechanism
ORDER BY min(source), mechanism
