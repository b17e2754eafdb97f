-- Asset check: the same action gets the same score under the same rule (an unchanged proposal scores
-- exactly as the selection). Input: selections, scores.
SELECT count(*) AS violations, min(s.analysis || ' / ' || s.image_id) AS example
FROM selections AS s
JOIN scores AS sc USING (analysis, image_id)
WHERE s.a_head = s.a_sel AND sc.u_local_head IS DISTINCT FROM sc.u_local_sel
