-- One mechanism's answers to the benchmark beside the items: the option it chose (highest option
-- likelihood) against the answer. Input: benchmark_items (sql/proposals/benchmark_items.sql), benchmark_scores
-- (models/benchmark.py SCORE_SCHEMA, one row per item); parameter $mechanism.
SELECT
    $mechanism AS mechanism,
    s.model,
    s.revision AS model_revision,
    i.item_id,
    i.cluster_id,
    i.axis,
    i.task,
    i."group",
    i.lake_group,
    s.input_sha256,
    s.options,
    s.loglik,
    s.prob,
    s.choice,
    i.answer_index,
    s.choice = i.answer_index AS correct
FROM benchmark_items AS i
JOIN benchmark_scores AS s ON s.item_id = i.item_id
ORDER BY i.row_index
