-- The declared overrides behind the selections (patient refusal, burden, ...): per analysis and reason,
-- the images and how many of them changed the proposal. Input: selections.
SELECT analysis, override, count(*) AS images, count(*) FILTER (WHERE a_sel <> a_head) AS changed
FROM selections
WHERE override IS NOT NULL
GROUP BY analysis, override
ORDER BY analysis, override
