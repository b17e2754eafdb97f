-- The declared local rules the review contexts came from: version, SHA-256 of the rule file, and the
-- clusters each names. Input: contexts.
SELECT rule_version, rule_sha256, count(*) AS clusters
FROM contexts
GROUP BY rule_version, rule_sha256
ORDER BY rule_version, rule_sha256
