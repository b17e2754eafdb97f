-- The demo's transfer table: per analysis, the benchmark accuracy of its mechanism beside J, J_auth,
-- p and Delta (image-weighted) and whether Delta's interval excludes 0. Input: transfer (catalog view).
SELECT
    analysis,
    CASE WHEN benchmark_available
         THEN printf('%.3f [%.3f, %.3f]', benchmark_accuracy, benchmark_ci_lower, benchmark_ci_upper)
         ELSE 'not scored' END AS "benchmark accuracy [95% CI]",
    round("J", 4) AS "J",
    round("J_auth", 4) AS "J_auth",
    round(intervention_rate, 4) AS p,
    printf('%+.4f [%+.4f, %+.4f]', "Delta_authority", "Delta_authority_ci_lower", "Delta_authority_ci_upper")
        AS "Delta [95% CI]",
    gap_excludes_zero
FROM transfer
ORDER BY study DESC, analysis_order, analysis
