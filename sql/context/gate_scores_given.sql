-- A source's own gate scores in the gate_proxy layout (every image of the lake; an image the file
-- does not score has a NULL s_gate, which the contexts check reports). Input: raw_gate_scores (valid),
-- gate_inputs(image_id, split); parameter $path.
SELECT
    i.image_id, i.split, TRY_CAST(g.s_gate AS DOUBLE) AS s_gate,
    'given' AS gate_proxy, CAST($path AS VARCHAR) AS proxy_source
FROM gate_inputs AS i
LEFT JOIN raw_gate_scores AS g ON trim(g.image_id) = i.image_id
ORDER BY i.image_id
