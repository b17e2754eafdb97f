-- Check: the engine's records of the two control mechanisms under the capacity ceiling equal the
-- published traces row for row -- executed action and all three utilities, by exact equality -- so
-- the estimators give the published numbers from them. Input: records (engine), reference_traces.
-- Returns one row.
WITH compared AS (
    SELECT
        r.mechanism,
        r.case_id,
        r.executed_action = t.a_exec
            AND r.utility_executed_local = t."Uz_exec"
            AND r.utility_proposed_local = t."Uz_head"
            AND r.utility_proposed_global = t."Ug_head" AS reproduced
    FROM records AS r
    JOIN reference_traces AS t
      ON t.study = 'mechanisms' AND t.mechanism = r.mechanism AND t.regime = r.regime AND t.image_id = r.case_id
    WHERE r.regime = 'capacity_ceiling' AND r.mechanism IN ('LLaVA-Med head', 'CLIP probe')
)
SELECT
    count(*) AS rows_compared,
    count(*) FILTER (WHERE reproduced) AS reproduced_rows,
    count(*) FILTER (WHERE reproduced IS NOT TRUE) AS violations,
    min(mechanism || ': ' || case_id) FILTER (WHERE reproduced IS NOT TRUE) AS example
FROM compared
