-- Per-cluster counts of the groups a fairness ratio compares, for its whole-cluster bootstrap: per
-- analysis, the cluster's rank among the analysis's clusters (ascending cluster_id over every record of
-- the analysis, sql/records/cluster_stats.sql's order, so the reference scheme draws the very
-- multiplicities of the analysis's estimates), and per compared group (group_index, 0-based within the
-- analysis) and reference level (level_slot, 0-based among the analysis's n_levels levels) the images
-- with a reference level and the hits of the proposal and of the selected action. Only the groups worst
-- or best for some accuracy are kept.
-- Input: records (analysis, cluster_id), subgroup_members, fairness_compared
-- (sql/estimates/fairness_compared.sql).
WITH ranks AS (
    SELECT
        analysis,
        cluster_id,
        CAST(row_number() OVER (PARTITION BY analysis ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank,
        CAST(count(*) OVER (PARTITION BY analysis) AS INTEGER) AS n_clusters
    FROM (SELECT DISTINCT analysis, cluster_id FROM records)
),
paired AS (
    SELECT DISTINCT analysis, grouping, group_value
    FROM fairness_compared
    WHERE worst_proposal OR best_proposal OR worst_selected OR best_selected OR worst_balanced_proposal
       OR best_balanced_proposal OR worst_balanced_selected OR best_balanced_selected
),
levelled AS (
    SELECT
        m.analysis,
        m.grouping,
        m.group_value,
        m.reference_level,
        m.cluster_id,
        CAST(CAST(substr(m.proposed_action, 2) AS INTEGER) = m.reference_level AS DOUBLE) AS proposal_hit,
        CAST(CAST(substr(m.executed_action, 2) AS INTEGER) = m.reference_level AS DOUBLE) AS selected_hit
    FROM subgroup_members AS m
    JOIN paired AS p USING (analysis, grouping, group_value)
    WHERE m.reference_level IS NOT NULL
),
slots AS (
    SELECT
        analysis,
        grouping,
        group_value,
        reference_level,
        CAST(dense_rank() OVER (PARTITION BY analysis ORDER BY grouping, group_value) - 1 AS INTEGER) AS group_index,
        CAST(dense_rank() OVER (PARTITION BY analysis ORDER BY reference_level) - 1 AS INTEGER) AS level_slot
    FROM (SELECT DISTINCT analysis, grouping, group_value, reference_level FROM levelled)
),
columns AS (
    SELECT *, CAST(max(level_slot) OVER (PARTITION BY analysis) + 1 AS INTEGER) AS n_levels FROM slots
)
SELECT
    l.analysis,
    c.grouping,
    c.group_value,
    c.reference_level,
    c.group_index,
    c.level_slot,
    c.n_levels,
    r.cluster_rank,
    r.n_clusters,
    CAST(count(*) AS DOUBLE) AS n,
    coalesce(sum(l.proposal_hit), 0.0) AS hits_proposal,
    coalesce(sum(l.selected_hit), 0.0) AS hits_selected
FROM levelled AS l
JOIN columns AS c USING (analysis, grouping, group_value, reference_level)
JOIN ranks AS r USING (analysis, cluster_id)
GROUP BY ALL
ORDER BY l.analysis, c.group_index, c.level_slot, r.cluster_rank
