-- Asset check: image ids are unique. Input: checked (a table with image_id).
SELECT count(*) - count(DISTINCT image_id) AS duplicates,
       (SELECT min(image_id) FROM (SELECT image_id FROM checked GROUP BY image_id HAVING count(*) > 1))
           AS example
FROM checked
