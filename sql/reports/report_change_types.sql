-- The human-AI interaction as the record holds it: per analysis, how often the reviewer kept the
-- proposal or substituted another action, by change type. Input: selections.
SELECT analysis, change_type, count(*) AS images
FROM selections
GROUP BY analysis, change_type
ORDER BY analysis, change_type
