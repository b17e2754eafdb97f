-- A benchmark's items placed in the lake (autheval/estimation/benchmark.py): an item of a lake image takes that
-- image's path (unless the file gives one) and its cluster, so the items of one lesion are one cluster;
-- an item given by image_path alone is a cluster of its own ('image:' || its id or path). An item of a
-- lake image also takes the image's recorded groupings as "images.<column>=value" pairs (lake_group):
-- sex, anatomic_site, fitzpatrick_skin_type and ita_category (an estimate from the pixels), where known.
-- Input: benchmark (autheval.estimation.benchmark.ITEMS_SCHEMA), images(image_id, path, sex, anatomic_site,
--        fitzpatrick_skin_type, ita_category), clusters(image_id, cluster_id).
-- Output: the items with image_path (null: an image_id the lake does not know), cluster_id,
--         cluster_source, lake_group.
SELECT
    b.row_index,
    b.item_id,
    b.image_id,
    coalesce(b.image_path, i.path) AS image_path,
    coalesce(c.cluster_id, 'image:' || coalesce(b.image_id, b.image_path)) AS cluster_id,
    CASE WHEN c.cluster_id IS NULL THEN 'image' ELSE 'lake' END AS cluster_source,
    b.question,
    b.options,
    b.answer,
    b.answer_index,
    b.axis,
    b.task,
    b."group",
    nullif(concat_ws(';',
        'images.sex=' || nullif(trim(CAST(i.sex AS VARCHAR)), ''),
        'images.anatomic_site=' || nullif(trim(CAST(i.anatomic_site AS VARCHAR)), ''),
        'images.fitzpatrick_skin_type=' || nullif(trim(CAST(i.fitzpatrick_skin_type AS VARCHAR)), ''),
        'images.ita_category=' || nullif(trim(CAST(i.ita_category AS VARCHAR)), '')), '') AS lake_group
FROM benchmark AS b
LEFT JOIN images AS i ON i.image_id = b.image_id
LEFT JOIN clusters AS c ON c.image_id = b.image_id
ORDER BY b.row_index
