-- The proposal mechanisms and where each came from ('file', 'model', ...), with the images proposed
-- for. Input: proposals.
SELECT mechanism, min(source) AS source, count(DISTINCT source) AS sources, count(*) AS images
FROM proposals
GROUP BY mechanism
ORDER BY min(source), mechanism
