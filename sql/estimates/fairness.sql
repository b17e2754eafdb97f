-- Fairness across groups (DermoGPT section 3): per (analysis, grouping), the ratio min/max of group
-- accuracy for the proposal and for the selected action (1 = equal accuracy in every group), over the
-- estimable groups with a known value only ('missing' is reported in subgroups, not compared); balanced
-- accuracy the same way. Each ratio carries a 95% whole-cluster bootstrap interval from the replicates
-- of the analysis's own estimates (sql/estimates/fairness_cluster_stats.sql; autheval/estimation/subgroups.py):
-- in every replicate the accuracy of each group is its resampled hits over its resampled images (a ratio
-- of sums; balanced accuracy the mean of the levels' recalls over the levels the replicate drew), and
-- the ratio is the point's worst group over the point's best group, that pair held fixed (the min/max
-- recomputed in each replicate is never above 1, so its interval could not contain 1 even for equal
-- groups); linear-interpolation quantiles (numpy's default) over the replicates, a replicate where the
-- ratio is undefined (a group drew no image, or the best group none right) dropped and counted.
-- A ratio whose denominator (the best group's accuracy) has an interval that includes 0 is not
-- estimable: no number, and `reason` says why; so is one whose best group's accuracy is 0.
-- Input: fairness_compared (sql/estimates/fairness_compared.sql), fairness_groups
-- (sql/estimates/fairness_groups.sql), fairness_replicate_sums(analysis, group_index, rep, and n,
-- hits_proposal, hits_selected: lists over the analysis's reference levels in order). Parameters $lower, $upper (quantiles), $interval_method,
-- $scheme, $seed, $reps.
WITH measures AS (  -- the four accuracies of every compared group, long, with the point's pair
    SELECT
        analysis, grouping, group_value, n_groups, measure, measure_order,
        CASE measure
            WHEN 'fairness_proposal' THEN accuracy_proposal
            WHEN 'fairness_selected' THEN accuracy_selected
            WHEN 'balanced_fairness_proposal' THEN balanced_accuracy_proposal
            ELSE balanced_accuracy_selected
        END AS value,
        CASE measure
            WHEN 'fairness_proposal' THEN worst_proposal
            WHEN 'fairness_selected' THEN worst_selected
            WHEN 'balanced_fairness_proposal' THEN worst_balanced_proposal
            ELSE worst_balanced_selected
        END AS is_worst,
        CASE measure
            WHEN 'fairness_proposal' THEN best_proposal
            WHEN 'fairness_selected' THEN best_selected
            WHEN 'balanced_fairness_proposal' THEN best_balanced_proposal
            ELSE best_balanced_selected
        END AS is_best
    FROM fairness_compared
    CROSS JOIN (
        VALUES ('fairness_proposal', 1), ('fairness_selected', 2), ('balanced_fairness_proposal', 3),
               ('balanced_fairness_selected', 4)
    ) AS m(measure, measure_order)
),
points AS (
    SELECT
        analysis, grouping, measure, measure_order,
        any_value(n_groups) AS n_groups,
        any_value(group_value) FILTER (WHERE is_worst) AS worst_group,
        any_value(group_value) FILTER (WHERE is_best) AS best_group,
        min(value) AS min_value,
        max(value) AS max_value
    FROM measures
    GROUP BY ALL
),
groups AS (  -- each group's four accuracies in each replicate (NULL: the replicate drew none of it);
    -- the level lists are summed in level order (list_sum), so the same inputs give the same last bit
    SELECT
        c.analysis, c.grouping, c.group_value, s.rep,
        list_sum(s.hits_proposal) / nullif(list_sum(s.n), 0) AS fairness_proposal,
        list_sum(s.hits_selected) / nullif(list_sum(s.n), 0) AS fairness_selected,
        list_sum([x[1] / x[2] FOR x IN list_zip(s.hits_proposal, s.n) IF x[2] > 0])
            / nullif(length(list_filter(s.n, v -> v > 0)), 0) AS balanced_fairness_proposal,
        list_sum([x[1] / x[2] FOR x IN list_zip(s.hits_selected, s.n) IF x[2] > 0])
            / nullif(length(list_filter(s.n, v -> v > 0)), 0) AS balanced_fairness_selected
    FROM fairness_replicate_sums AS s
    JOIN fairness_groups AS c USING (analysis, group_index)
),
ratios AS (  -- the point's worst group over its best group, in each replicate (equi-joins: fast)
    SELECT
        p.analysis, p.grouping, p.measure, b.rep,
        CASE p.measure
            WHEN 'fairness_proposal' THEN w.fairness_proposal
            WHEN 'fairness_selected' THEN w.fairness_selected
            WHEN 'balanced_fairness_proposal' THEN w.balanced_fairness_proposal
            ELSE w.balanced_fairness_selected
        END AS numerator,
        CASE p.measure
            WHEN 'fairness_proposal' THEN b.fairness_proposal
            WHEN 'fairness_selected' THEN b.fairness_selected
            WHEN 'balanced_fairness_proposal' THEN b.balanced_fairness_proposal
            ELSE b.balanced_fairness_selected
        END AS denominator
    FROM points AS p
    JOIN groups AS b ON b.analysis = p.analysis AND b.grouping = p.grouping AND b.group_value = p.best_group
    LEFT JOIN groups AS w
        ON w.analysis = p.analysis AND w.grouping = p.grouping AND w.group_value = p.worst_group AND w.rep = b.rep
),
bounds AS (
    SELECT
        analysis, grouping, measure,
        -- one sort gives both quantiles
        quantile_cont(numerator / nullif(denominator, 0), [$lower, $upper])
            FILTER (WHERE numerator / nullif(denominator, 0) IS NOT NULL) AS ci,
        quantile_cont(denominator, [$lower, $upper]) FILTER (WHERE denominator IS NOT NULL) AS denominator_ci,
        count(*) FILTER (WHERE numerator / nullif(denominator, 0) IS NULL) AS reps_undefined
    FROM ratios
    GROUP BY ALL
),
decided AS (
    SELECT
        p.*,
        b.ci,
        b.denominator_ci,
        coalesce(b.reps_undefined, 0) AS reps_undefined,
        -- no accuracy of this kind (proposal-only records have no selection): no ratio, nothing to say
        p.max_value IS NOT NULL AND (p.max_value = 0 OR coalesce(b.denominator_ci[1] <= 0, FALSE)) AS not_estimable
    FROM points AS p
    LEFT JOIN bounds AS b USING (analysis, grouping, measure)
),
worded AS (
    SELECT
        *,
        CASE
            WHEN not_estimable AND max_value = 0 THEN
                measure || ' not estimable: the best group''s (' || best_group || ') accuracy is 0'
            WHEN not_estimable THEN
                measure || ' not estimable: the interval of the best group''s (' || best_group
                || ') accuracy, [' || printf('%.3f', denominator_ci[1]) || ', ' || printf('%.3f', denominator_ci[2])
                || '], includes 0'
        END AS why,
        CASE WHEN NOT not_estimable THEN min_value / max_value END AS ratio,
        CASE WHEN NOT not_estimable AND max_value IS NOT NULL THEN ci END AS ratio_ci
    FROM decided
)
SELECT
    analysis,
    grouping,
    any_value(n_groups) AS n_groups,
    any_value(worst_group) FILTER (WHERE measure = 'fairness_proposal') AS worst_group_proposal,
    any_value(best_group) FILTER (WHERE measure = 'fairness_proposal') AS best_group_proposal,
    any_value(min_value) FILTER (WHERE measure = 'fairness_proposal') AS min_accuracy_proposal,
    any_value(max_value) FILTER (WHERE measure = 'fairness_proposal') AS max_accuracy_proposal,
    any_value(ratio) FILTER (WHERE measure = 'fairness_proposal') AS fairness_proposal,
    any_value(ratio_ci[1]) FILTER (WHERE measure = 'fairness_proposal') AS fairness_proposal_ci_lower,
    any_value(ratio_ci[2]) FILTER (WHERE measure = 'fairness_proposal') AS fairness_proposal_ci_upper,
    any_value(worst_group) FILTER (WHERE measure = 'fairness_selected') AS worst_group_selected,
    any_value(best_group) FILTER (WHERE measure = 'fairness_selected') AS best_group_selected,
    any_value(min_value) FILTER (WHERE measure = 'fairness_selected') AS min_accuracy_selected,
    any_value(max_value) FILTER (WHERE measure = 'fairness_selected') AS max_accuracy_selected,
    any_value(ratio) FILTER (WHERE measure = 'fairness_selected') AS fairness_selected,
    any_value(ratio_ci[1]) FILTER (WHERE measure = 'fairness_selected') AS fairness_selected_ci_lower,
    any_value(ratio_ci[2]) FILTER (WHERE measure = 'fairness_selected') AS fairness_selected_ci_upper,
    any_value(ratio) FILTER (WHERE measure = 'balanced_fairness_proposal') AS balanced_fairness_proposal,
    any_value(ratio_ci[1]) FILTER (WHERE measure = 'balanced_fairness_proposal')
        AS balanced_fairness_proposal_ci_lower,
    any_value(ratio_ci[2]) FILTER (WHERE measure = 'balanced_fairness_proposal')
        AS balanced_fairness_proposal_ci_upper,
    any_value(ratio) FILTER (WHERE measure = 'balanced_fairness_selected') AS balanced_fairness_selected,
    any_value(ratio_ci[1]) FILTER (WHERE measure = 'balanced_fairness_selected')
        AS balanced_fairness_selected_ci_lower,
    any_value(ratio_ci[2]) FILTER (WHERE measure = 'balanced_fairness_selected')
        AS balanced_fairness_selected_ci_upper,
    string_agg(why, '; ' ORDER BY measure_order) AS reason,  -- NULL: every ratio estimable
    max(reps_undefined) AS reps_undefined,
    'image_weighted' AS unit,
    CAST($interval_method AS VARCHAR) AS interval_method,
    CAST($lower AS DOUBLE) AS quantile_lower,
    CAST($upper AS DOUBLE) AS quantile_upper,
    CAST($scheme AS VARCHAR) AS scheme,
    CAST($seed AS BIGINT) AS seed,
    CAST($reps AS BIGINT) AS reps
FROM worded
GROUP BY analysis, grouping
ORDER BY analysis, grouping
