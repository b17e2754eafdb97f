-- Images dropped as duplicates (a 'drop' rule keeps one image per component), by hash and threshold.
-- Input: duplicate_removals.
SELECT hash_kind, threshold, count(*) AS removed
FROM duplicate_removals
GROUP BY hash_kind, threshold
ORDER BY hash_kind, threshold
