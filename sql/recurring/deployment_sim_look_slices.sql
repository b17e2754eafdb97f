-- The latest look of a landed deployment as the confidence sequence reads it: every landed record once,
-- its site as the analysis, in the canonical columns sql/records/cluster_sums.sql reads; the slice of every
-- site pooled is added at the level of the clusters' sums (sql/recurring/deployment_sim_pooled_sums.sql),
-- so no record is summed twice. Case ids are not needed (clusters are the units; cluster ids are qualified
-- by the site: two sites that reuse an id hold two lesions). Input: landed_records (with site). Output:
-- analysis, cluster_id, intervened, utility_executed_local, utility_proposed_local, utility_proposed_global.
SELECT site AS analysis, site || '/' || CAST(cluster_id AS VARCHAR) AS cluster_id, intervened, utility_executed_local, utility_proposed_local,
       utility_proposed_global
FROM landed_records
