-- The training runs behind the model mechanisms: trainer, mechanism, base model and revision, the hash
-- of the data trained on and the seed. Input: model_runs.
SELECT trainer, mechanism, model, model_revision, data_sha256, seed
FROM model_runs
GROUP BY ALL
ORDER BY trainer, mechanism
