-- Each landed partition's content key and the key of the file it supersedes (NULL: none), one row per
-- partition. Input: landed_given (recurring/landed_given_view.sql).
SELECT landed_key, any_value(supersedes) AS supersedes
FROM landed_given
GROUP BY landed_key
ORDER BY landed_key
