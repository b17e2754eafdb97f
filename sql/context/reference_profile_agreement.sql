-- reference_profile_agreement: how many reference test clusters get a profile from the image-level
-- profile rule (contexts) that the published utilities allow: among the clusters the traces identify
-- (one fitting profile), among all clusters (any fitting profile), and for the cluster of
-- $diagnostic_image (spec 9.1: ISIC_0014818_downsampled, the one image known to need the
-- missing-age-and-site rule; its utilities require HAM_like).
-- Input: contexts, reference_cluster_profiles, clusters. Returns one row.
WITH judged AS (
    SELECT
        c.cluster_id,
        c.profile,
        max(f.n_fitting) AS n_fitting,
        bool_or(f.profile = c.profile) AS reproduced
    FROM contexts AS c
    JOIN reference_cluster_profiles AS f ON f.cluster_id = c.cluster_id
    GROUP BY c.cluster_id, c.profile
),
diagnostic AS (
    SELECT j.profile, j.reproduced
    FROM judged AS j
    JOIN clusters AS k ON k.cluster_id = j.cluster_id
    WHERE k.image_id = $diagnostic_image
)
SELECT
    count(*) FILTER (WHERE n_fitting = 1) AS identified_clusters,
    count(*) FILTER (WHERE n_fitting = 1 AND reproduced) AS identified_reproduced,
    count(*) AS clusters,
    count(*) FILTER (WHERE reproduced) AS clusters_reproduced,
    (SELECT profile FROM diagnostic) AS diagnostic_profile,
    coalesce((SELECT reproduced FROM diagnostic), false) AS diagnostic_reproduced
FROM judged
