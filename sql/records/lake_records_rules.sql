-- The rules that scored each analysis of a reviewed cohort's `records` (a view over the lake's
-- files), in the order the rows give them (autheval.estimation.provenance.run_provenance keeps the first of an
-- analysis). Input: records, with rule_version and rule_sha256.
SELECT analysis, rule_version, rule_sha256
FROM records
GROUP BY analysis, rule_version, rule_sha256
ORDER BY min(_autheval_row)
