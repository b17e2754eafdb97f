-- review_scores: the `scores` table, U_z of the proposal and of the selection under the same declared
-- local rule and U_g of the proposal, per analysis and image (AuthEval spec 4), naming the rules.
-- Input: scored_selections.
SELECT analysis, image_id, u_local_head, u_local_sel, u_global_head, rule_version, rule_sha256
FROM scored_selections
