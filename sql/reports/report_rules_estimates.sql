-- The declared rules the estimates name, where the lake has no review contexts (the reference study):
-- version, SHA-256 and the analyses each scored. Input: estimates (with the provenance columns).
SELECT rule_version, rule_sha256, count(DISTINCT analysis) AS analyses
FROM estimates
WHERE rule_version IS NOT NULL OR rule_sha256 IS NOT NULL
GROUP BY rule_version, rule_sha256
ORDER BY rule_version, rule_sha256
