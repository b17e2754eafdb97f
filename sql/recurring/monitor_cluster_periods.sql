-- Every lesion cluster of every monitored slice at each period it appears in, with its sums to that
-- period (a lesion seen again in a later period stays one cluster: its sums grow). A cluster is a
-- (site, cluster_id): two sites that reuse an id hold two lesions, also in a slice pooled over sites.
-- Input: landed_records (site, model_version, period, cluster_id, executed_action, intervened, the
-- utilities, proposed_local_given), monitor_slices(slice, site, model_version; 'all' = every one).
-- Output: slice, site, cluster_id, period, first_seen, n_period, ch_period (the period's cases and
-- changed cases), changed_local, local_given, global_given, executed (the period's counts that decide the
-- record level, as records/records_check.sql's), and the sums to date n, ch, ex, pr, gp (cases,
-- changed cases, executed, proposed and gap utilities).
WITH slice_rows AS (
    SELECT s.slice, r.site, r.cluster_id, r.period, r.executed_action, r.intervened, r.utility_executed_local AS ue,
           r.utility_proposed_local AS up, r.utility_proposed_global AS ug, r.proposed_local_given
    FROM landed_records AS r
    JOIN monitor_slices AS s
      ON (s.site = 'all' OR s.site = r.site) AND (s.model_version = 'all' OR s.model_version = r.model_version)
),
partial AS (  -- a cluster's sums within one period
    SELECT
        slice, site, cluster_id, period,
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
    GROUP BY slice, site, cluster_id, period
)
SELECT
    slice, site, cluster_id, period,
    row_number() OVER w = 1 AS first_seen,
    n AS n_period, ch AS ch_period, changed_local, local_given, global_given, executed,
    sum(n) OVER w AS n, sum(ch) OVER w AS ch, sum(ex) OVER w AS ex, sum(pr) OVER w AS pr, sum(gp) OVER w AS gp
FROM partial
WINDOW w AS (PARTITION BY slice, site, cluster_id ORDER BY period ROWS UNBOUNDED PRECEDING)
