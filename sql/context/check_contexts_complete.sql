-- Check: every context row has what the review needs (AuthEval spec 3.3: a missing profile or gate
-- score is an error): counts clusters with a NULL profile, s_gate, risk bin, capacity or floor.
-- Input: contexts. Returns one row.
SELECT
    count(*) FILTER (WHERE profile IS NULL OR s_gate IS NULL OR risk_bin IS NULL
                     OR capacity IS NULL OR floor IS NULL) AS violations,
    count(*) AS clusters_checked,
    min(cluster_id) FILTER (WHERE profile IS NULL OR s_gate IS NULL OR risk_bin IS NULL
                            OR capacity IS NULL OR floor IS NULL) AS example
FROM contexts
