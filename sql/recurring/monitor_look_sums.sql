-- Every look of every monitored slice in one pass over the landed records, without re-reading the
-- records of earlier looks: per slice, per cluster and period the cluster's sums, cumulated over the
-- cluster's periods; each change of a cluster's (Y_c, X_c) at the period it changes (a cluster first
-- seen, or seen again: a lesion stays one cluster across periods) enters as the difference of its
-- moments before and after; summed over periods to each look, they give the moments of that look's
-- clusters: sum Y, sum X, sum Y^2, sum X Y, sum X^2 of every ratio (sql/estimates/delta_method.sql's Y_c, X_c, both
-- units), the cluster count, and the counts that decide the record level (records/records_profile.sql's).
-- sql/recurring/monitor_look_ratios.sql turns them into each ratio and its delta-method standard error.
-- Input: landed_records (site, model_version, period, cluster_id, executed_action, intervened, the
-- utilities, proposed_local_given), monitor_slices(slice, site, model_version; 'all' = every one).
-- Output: slice, look, period, n_cases, n_clusters, n_changed, n_changed_local, n_local, n_global,
-- n_executed and the moments (s_*: sums, q_*: sums of squares, c_*: sums of products).
WITH slice_rows AS (
    SELECT s.slice, r.cluster_id, r.period, r.executed_action, r.intervened, r.utility_executed_local AS ue,
           r.utility_proposed_local AS up, r.utility_proposed_global AS ug, r.proposed_local_given
    FROM landed_records AS r
    JOIN monitor_slices AS s
      ON (s.site = 'all' OR s.site = r.site) AND (s.model_version = 'all' OR s.model_version = r.model_version)
),
looks AS (
    SELECT slice, period, CAST(row_number() OVER (PARTITION BY slice ORDER BY period) AS BIGINT) AS look
    FROM (SELECT DISTINCT slice, period FROM slice_rows)
),
partial AS (  -- a cluster's sums within one period
    SELECT
        slice, cluster_id, period,
        CAST(count(*) AS DOUBLE) AS n,
        CAST(sum(CAST(intervened AS INTEGER)) AS DOUBLE) AS ch,
        fsum(ue) AS ex,
        fsum(up) AS pr,
        fsum(up - ue) AS gp,
        count(*) FILTER (WHERE intervened AND up IS NOT NULL) AS changed_local,
        count(*) FILTER (WHERE proposed_local_given) AS local_given,
        count(ug) AS global_given,
        count(executed_action) AS executed
    FROM slice_rows
    GROUP BY slice, cluster_id, period
),
state AS (  -- the cluster's sums to each period it appears in
    SELECT
        slice, cluster_id, period, changed_local, local_given, global_given, executed,
        partial.n AS n_period, partial.ch AS ch_period,
        sum(n) OVER w AS n, sum(ch) OVER w AS ch, sum(ex) OVER w AS ex, sum(pr) OVER w AS pr, sum(gp) OVER w AS gp,
        row_number() OVER w = 1 AS first_seen
    FROM partial
    WINDOW w AS (PARTITION BY slice, cluster_id ORDER BY period ROWS UNBOUNDED PRECEDING)
),
moments AS (  -- the cluster's moments after this period (image_weighted: sums; cluster_equal: means)
    SELECT
        *,
        ex / n AS mex, ch / n AS mch, pr / n AS mpr, gp / n AS mgp
    FROM state
),
steps AS (  -- what this period changes: the moments now minus the moments before (0 when first seen)
    SELECT
        slice, period,
        CAST(first_seen AS INTEGER) AS new_cluster, n_period, ch_period, changed_local, local_given, global_given, executed,
        n - coalesce(lag(n) OVER c, 0) AS d_n,
        n * n - coalesce(lag(n * n) OVER c, 0) AS d_nn,
        ch - coalesce(lag(ch) OVER c, 0) AS d_ch,
        ch * ch - coalesce(lag(ch * ch) OVER c, 0) AS d_chch,
        ch * n - coalesce(lag(ch * n) OVER c, 0) AS d_chn,
        ex - coalesce(lag(ex) OVER c, 0) AS d_ex,
        ex * ex - coalesce(lag(ex * ex) OVER c, 0) AS d_exex,
        ex * n - coalesce(lag(ex * n) OVER c, 0) AS d_exn,
        pr - coalesce(lag(pr) OVER c, 0) AS d_pr,
        pr * pr - coalesce(lag(pr * pr) OVER c, 0) AS d_prpr,
        pr * n - coalesce(lag(pr * n) OVER c, 0) AS d_prn,
        gp - coalesce(lag(gp) OVER c, 0) AS d_gp,
        gp * gp - coalesce(lag(gp * gp) OVER c, 0) AS d_gpgp,
        gp * n - coalesce(lag(gp * n) OVER c, 0) AS d_gpn,
        gp * ch - coalesce(lag(gp * ch) OVER c, 0) AS d_gpch,
        mex - coalesce(lag(mex) OVER c, 0) AS d_mex,
        mex * mex - coalesce(lag(mex * mex) OVER c, 0) AS d_mexmex,
        mch - coalesce(lag(mch) OVER c, 0) AS d_mch,
        mch * mch - coalesce(lag(mch * mch) OVER c, 0) AS d_mchmch,
        mpr - coalesce(lag(mpr) OVER c, 0) AS d_mpr,
        mpr * mpr - coalesce(lag(mpr * mpr) OVER c, 0) AS d_mprmpr,
        mgp - coalesce(lag(mgp) OVER c, 0) AS d_mgp,
        mgp * mgp - coalesce(lag(mgp * mgp) OVER c, 0) AS d_mgpmgp,
        mgp * mch - coalesce(lag(mgp * mch) OVER c, 0) AS d_mgpmch
    FROM moments
    WINDOW c AS (PARTITION BY slice, cluster_id ORDER BY period)
),
per_period AS (
    SELECT
        slice, period,
        sum(new_cluster) AS new_clusters, sum(n_period) AS cases, sum(ch_period) AS changed,
        sum(changed_local) AS changed_local, sum(local_given) AS local_given, sum(global_given) AS global_given,
        sum(executed) AS executed,
        fsum(d_n) AS d_n, fsum(d_nn) AS d_nn, fsum(d_ch) AS d_ch, fsum(d_chch) AS d_chch, fsum(d_chn) AS d_chn,
        fsum(d_ex) AS d_ex, fsum(d_exex) AS d_exex, fsum(d_exn) AS d_exn,
        fsum(d_pr) AS d_pr, fsum(d_prpr) AS d_prpr, fsum(d_prn) AS d_prn,
        fsum(d_gp) AS d_gp, fsum(d_gpgp) AS d_gpgp, fsum(d_gpn) AS d_gpn, fsum(d_gpch) AS d_gpch,
        fsum(d_mex) AS d_mex, fsum(d_mexmex) AS d_mexmex, fsum(d_mch) AS d_mch, fsum(d_mchmch) AS d_mchmch,
        fsum(d_mpr) AS d_mpr, fsum(d_mprmpr) AS d_mprmpr, fsum(d_mgp) AS d_mgp, fsum(d_mgpmgp) AS d_mgpmgp,
        fsum(d_mgpmch) AS d_mgpmch
    FROM steps
    GROUP BY slice, period
)
SELECT
    p.slice, l.look, p.period,
    CAST(sum(cases) OVER t AS BIGINT) AS n_cases,
    CAST(sum(new_clusters) OVER t AS BIGINT) AS n_clusters,
    CAST(sum(changed) OVER t AS BIGINT) AS n_changed,
    CAST(sum(changed_local) OVER t AS BIGINT) AS n_changed_local,
    CAST(sum(local_given) OVER t AS BIGINT) AS n_local,
    CAST(sum(global_given) OVER t AS BIGINT) AS n_global,
    CAST(sum(executed) OVER t AS BIGINT) AS n_executed,
    sum(d_n) OVER t AS s_n, sum(d_nn) OVER t AS q_n,
    sum(d_ch) OVER t AS s_ch, sum(d_chch) OVER t AS q_ch, sum(d_chn) OVER t AS c_ch_n,
    sum(d_ex) OVER t AS s_ex, sum(d_exex) OVER t AS q_ex, sum(d_exn) OVER t AS c_ex_n,
    sum(d_pr) OVER t AS s_pr, sum(d_prpr) OVER t AS q_pr, sum(d_prn) OVER t AS c_pr_n,
    sum(d_gp) OVER t AS s_gp, sum(d_gpgp) OVER t AS q_gp, sum(d_gpn) OVER t AS c_gp_n, sum(d_gpch) OVER t AS c_gp_ch,
    sum(d_mex) OVER t AS s_mex, sum(d_mexmex) OVER t AS q_mex, sum(d_mch) OVER t AS s_mch, sum(d_mchmch) OVER t AS q_mch,
    sum(d_mpr) OVER t AS s_mpr, sum(d_mprmpr) OVER t AS q_mpr, sum(d_mgp) OVER t AS s_mgp, sum(d_mgpmgp) OVER t AS q_mgp,
    sum(d_mgpmch) OVER t AS c_mgp_mch
FROM per_period AS p
JOIN looks AS l ON l.slice = p.slice AND l.period = p.period
WINDOW t AS (PARTITION BY p.slice ORDER BY l.look ROWS UNBOUNDED PRECEDING)
ORDER BY p.slice, l.look
