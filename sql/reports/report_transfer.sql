-- Transfer as the report shows it: each analysis's benchmark accuracy beside its J, J_auth, p and
-- authority gap (image-weighted): does the benchmark describe the workflow? Input: transfer.
SELECT analysis, mechanism, regime, benchmark_model, benchmark_items, benchmark_accuracy, benchmark_ci_lower,
       benchmark_ci_upper, benchmark_available, benchmark_reason, J, J_auth, intervention_rate,
       Delta_authority, Delta_authority_ci_lower, Delta_authority_ci_upper, gap_excludes_zero
FROM transfer
ORDER BY analysis_order, analysis
