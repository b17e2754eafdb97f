-- The proposal mechanisms of a proposals table that names no source (the reference study's frozen
-- heads), with the images proposed for. Input: proposals.
SELECT mechanism, CAST(NULL AS VARCHAR) AS source, 0 AS sources, count(*) AS images
FROM proposals
GROUP BY mechanism
ORDER BY mechanism
