-- Error cases of the proposal and of the selected action against the reference action level (under-
-- escalation: an action below the reference level; over-escalation: above it), per analysis.
-- Input: selections, images.
WITH levelled AS (
    SELECT s.analysis,
           CAST(substr(s.a_head, 2) AS INTEGER) - i.ideal_action_level AS head_gap,
           CAST(substr(s.a_sel, 2) AS INTEGER) - i.ideal_action_level AS sel_gap
    FROM selections s
    JOIN images i ON i.image_id = s.image_id
    WHERE i.ideal_action_level IS NOT NULL
)
SELECT analysis, count(*) AS images,
       count(*) FILTER (WHERE head_gap < 0) AS proposal_under,
       count(*) FILTER (WHERE head_gap > 0) AS proposal_over,
       count(*) FILTER (WHERE sel_gap < 0) AS selected_under,
       count(*) FILTER (WHERE sel_gap > 0) AS selected_over,
       count(*) FILTER (WHERE head_gap = 0 AND sel_gap <> 0) AS review_broke_correct,
       count(*) FILTER (WHERE head_gap <> 0 AND sel_gap = 0) AS review_fixed_wrong
FROM levelled
GROUP BY analysis
ORDER BY analysis
