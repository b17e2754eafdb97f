-- The lake's `records` for a raw cohort: the review's records (sql/review_records.sql) with the study
-- they belong to (the review regime: mechanisms are compared within a regime) and their record level
-- (the simulated review scores the proposal locally on every row: full counterfactual).
-- Input: review_records.
SELECT
    analysis,
    regime AS study,
    mechanism,
    regime,
    case_id,
    cluster_id,
    proposed_action,
    executed_action,
    utility_executed_local,
    utility_proposed_local,
    utility_proposed_global,
    'full_counterfactual' AS record_level,
    rule_version,
    rule_sha256
FROM review_records
ORDER BY analysis, case_id
