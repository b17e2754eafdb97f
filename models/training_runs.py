"""What each trainer learned from which data (issue 16 item 3): the readout's C search, the probe's
epochs and tau, the gate proxy's 48 candidates and the fine-tune's losses as one long table,
`model_runs`, so a reviewer can query them after an in-process run (the demo keeps no Dagster events).

One table for all trainers, long format (one row per fact): the trainers' tables have nothing in
common but "a metric at a step", and one table answers "which data and config made this mechanism"
with one query. A row is a fact (step_kind, step, metric, value, chosen) named by the run that made it
(trainer, mechanism, model, model_revision, data_sha256, config, seed, software_version):

* readout:    step_kind `cv` (step = position of C in the grid, metric `C` and the out-of-fold
              metrics), `lock` (the refit at the chosen C, its lock-partition metrics); a cohort that
              cannot support the fit uses the published lock: step_kind `published_lock` (its C and
              published CV metrics), data_sha256 of the validation rows it fell back on, config says why;
* probe:      step_kind `epoch` (step = epoch: train_loss and validation metrics), `lock` (tau_1..3,
              validation_head_mae of the chosen epoch);
* gate_proxy: step_kind `candidate` (step = candidate, metrics alpha, temperature and the validation
              metrics), read from `gate_proxy_selection`, where the fit records them once;
* finetune:   step_kind `step` (train_loss per optimizer step), `epoch` (val_loss); chosen marks the last
              step and epoch: the adapter saved is the last one;
* grpo:       step_kind `step` (the MAVIC components' means, reward_std, kl, loss, lr per optimizer step;
              models/grpo.py); chosen marks the last step.

Steps count from 1. `chosen` marks the selected C / epoch / candidate (every row of that step).
`config` is JSON text with sorted keys.

How the rows reach the table: a trained mechanism's proposals table (`readout`, `probe`, `finetune`)
carries its run's rows as JSON under the Parquet metadata key `model_runs`, written in the same file
as the proposals, so the run and the proposals it made cannot part; the `model_runs` asset
(assets/model_proposals.py) gathers them with the gate proxy's candidates. No Dagster here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa

from autheval.columns import schema

TRAINERS = ("readout", "probe", "gate_proxy", "finetune", "grpo")
SCHEMA = schema(
    "trainer mechanism model model_revision data_sha256 config seed step_kind step metric",
    ("value", pa.float64()),
    "chosen software_version",
)
METADATA_KEY = "model_runs"  # the Parquet key-value entry under which a proposals table carries its run


def config_json(config) -> str:
    """A config as the table stores it: JSON text, sorted keys (tuples as lists, other values as text)."""
    return config if isinstance(config, str) else json.dumps(config, sort_keys=True, default=str)


def facts(
    step_kind: str, records: list[dict], step_key: str | None = None, chosen=None, skip: tuple[str, ...] = ()
) -> list[dict]:
    """Each numeric field of each record (but `step_key` and `skip`) as one fact at step
    `record[step_key]`, or at its 1-based position; nested dicts become `outer.inner`. `chosen` is the
    chosen step (True: every record's)."""
    out = []
    for position, record in enumerate(records, 1):
        step = int(record[step_key]) if step_key else position
        for metric, value in _numbers(record, (*skip, step_key)):
            out.append(
                {
                    "step_kind": step_kind,
                    "step": step,
                    "metric": metric,
                    "value": value,
                    "chosen": chosen is True or step == chosen,
                }
            )
    return out


def _numbers(record: dict, skip=(), prefix: str = ""):
    for key, value in record.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            yield from _numbers(value, (), f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) or _is_numpy_number(value):
            yield f"{prefix}{key}", float(value)


def _is_numpy_number(value) -> bool:
    import numpy as np

    return isinstance(value, (np.integer, np.floating))


@dataclass(frozen=True)
class TrainingRun:
    """One trainer's run: what it read (data_sha256), how (config, seed) and the facts it produced."""

    trainer: str
    data_sha256: str | None
    config: dict | str
    seed: int | None
    facts: list[dict] = field(default_factory=list)

    def table(
        self,
        mechanism: str | None = None,
        model: str | None = None,
        model_revision: str | None = None,
        software_version: str | None = None,
    ) -> pa.Table:
        """The run's rows of `model_runs`; `model` is the directory name, `model_revision` its content hash."""
        if self.trainer not in TRAINERS:
            raise ValueError(f"unknown trainer {self.trainer!r}; expected one of {TRAINERS}")
        if software_version is None:
            from autheval import __version__ as software_version
        named = {
            "trainer": self.trainer,
            "mechanism": mechanism,
            "model": model,
            "model_revision": model_revision,
            "data_sha256": self.data_sha256,
            "config": config_json(self.config),
            "seed": None if self.seed is None else int(self.seed),
            "software_version": f"autheval {software_version}",
        }
        return pa.Table.from_pylist([{**named, **fact} for fact in self.facts], schema=SCHEMA)


def encode(table: pa.Table) -> str:
    """A run's rows as the JSON text a proposals table carries (METADATA_KEY), NaN kept as NaN."""
    return json.dumps(table.cast(SCHEMA).to_pylist(), sort_keys=True, allow_nan=True)


def decode(schema_metadata: dict | None) -> pa.Table:
    """The run rows a table's Parquet metadata carries (empty when it carries none: a trainer not run)."""
    text = (schema_metadata or {}).get(METADATA_KEY.encode())
    if text is None:
        return SCHEMA.empty_table()
    rows = json.loads(text)
    for row in rows:
        if row["value"] is not None and not isinstance(row["value"], float):
            row["value"] = float(row["value"])
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def combine(tables: list[pa.Table]) -> pa.Table:
    """The `model_runs` table: runs in trainer order (TRAINERS), rows in the order each run gave them."""
    tables = [t.cast(SCHEMA) for t in tables if t.num_rows]
    if not tables:
        return SCHEMA.empty_table()
    order = {name: k for k, name in enumerate(TRAINERS)}
    tables.sort(key=lambda t: order[t.column("trainer")[0].as_py()])
    return pa.concat_tables(tables).replace_schema_metadata(None)
