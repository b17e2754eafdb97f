-- Subgroups as the report shows them: the image-weighted authority gap of each group with its interval
-- and the multiplicity-adjusted flag, and the groups too small to estimate with the reason.
-- Input: subgroups.
SELECT analysis, grouping, group_value, n_images, n_clusters, estimable, reason, accuracy_proposal,
       accuracy_selected, estimate, ci_lower, ci_upper, p_adjusted, q_value, family_size, excludes_zero,
       excludes_zero_adjusted, status
FROM subgroups
WHERE NOT estimable OR (metric = 'Delta_authority' AND unit = 'image_weighted')
ORDER BY analysis, grouping, group_value
