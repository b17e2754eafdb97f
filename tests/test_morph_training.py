"""The training assets learn (issue 32), on the tiny morphology task (models/morph_task.py) and a seeded
tiny Gemma3 (models/tiny.py, tiny-gemma3-morph), on CPU:

* the fine-tune, with the completion target, teaches DermoGPT's format: greedy format validity on
  held-out images at least SFT_VALIDITY;
* GRPO on MAVIC from that SFT model raises the held-out reward by more than GRPO_MARGIN in GRPO_STEPS
  steps, with KL to the reference 0 at the first step (the adapter starts at zero), then non-zero and
  below KL_BOUND;
* with the reward's sign flipped the held-out reward falls;
* with the GRPO adapter disabled, the model is the SFT model: the same greedy completions and
  log-likelihoods, while the adapter on moves them.

The thresholds come from benchmarks/training_curves.py (seeds 0, 1, 2 of the same config; this run is
seed 0; docs/models.md, "Do the trainers learn?"): greedy SFT validity 1.0, 0.81, 1.0; held-out reward
gains after 24 GRPO steps 0.45, 0.55, 0.72, while the seed-to-seed spread (SD over seeds) of the held-out
reward was 0.16 at the start and 0.05 at step 24, and KL stayed at or below 0.13. The test asks for
validity 0.75, a gain above 0.2 (above the spread, below every seed's gain) and KL below 0.5.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # about 2 minutes on 2 shared cores (still part of make test)

ROOT = Path(__file__).resolve().parent.parent
SFT_VALIDITY = 0.75  # greedy r_fmt on the held-out images after SFT (benchmark: 0.81 to 1.0)
GRPO_STEPS = 24
GRPO_MARGIN = 0.2  # held-out reward gain over GRPO_STEPS steps (benchmark: 0.45 to 0.72; spread 0.16)
KL_BOUND = 0.5  # per-token KL to the SFT model, every step (benchmark: at most 0.13 where evaluated)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from models.morph_task import build_task, read_task

    return read_task(build_task(tmp_path_factory.mktemp("morph-task"), n=240, seed=3))


@pytest.fixture(scope="module")
def torch_one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and the suite runs beside
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(task, tmp_path_factory, torch_one_thread):
    from models.morph_training import CurveConfig, grpo_stage, sft_stage

    train, held_out = task
    work = tmp_path_factory.mktemp("morph-runs")
    config = CurveConfig(seed=0, grpo_steps=GRPO_STEPS)
    sft = sft_stage(train, held_out, work, config)
    grpo = grpo_stage(train, held_out, sft["merged"], work, config)
    return {"config": config, "sft": sft, "grpo": grpo, "work": work}


def heldout_curve(run: dict) -> list[tuple[int, float]]:
    return [(s["step"], s["heldout_reward"]) for s in run["step_log"] if s["heldout_reward"] is not None]


def test_the_task_is_the_synthetic_cohort_with_answers_the_image_plants(task):
    from models.mavic import score_completions
    from models.morph_task import PLANTED_MORPHOLOGY, target_completion

    train, held_out = task
    assert train.num_rows + held_out.num_rows == 240 and held_out.num_rows >= 32
    assert not set(train.column("lesion_id").to_pylist()) & set(held_out.column("lesion_id").to_pylist())
    rows = held_out.to_pylist()
    assert {r["completion"] for r in rows} <= {target_completion(d) for d in PLANTED_MORPHOLOGY}
    assert all(json.loads(r["reference_attributes"]) == PLANTED_MORPHOLOGY[r["reference_diagnosis"]] for r in rows)
    # the targets score full marks: valid format, right diagnosis, the planted morphology
    scored = score_completions(
        [r["completion"] for r in rows],
        [r["modality"] for r in rows],
        [r["reference_diagnosis"] for r in rows],
        [json.loads(r["reference_attributes"]) for r in rows],
        [r["image_id"] for r in rows],
    )
    assert scored["r_fmt"].min() == scored["r_acc"].min() == scored["s_morph"].min() == 1.0
    assert "age=" in rows[0]["prompt"] and "<morph></morph>" in rows[0]["prompt"]
    assert rows[0]["reference_diagnosis"] not in rows[0]["prompt"].split("Public metadata:")[1]


def test_the_fine_tune_teaches_the_format(trained):
    sft = trained["sft"]
    greedy = sft["heldout_greedy"]
    assert greedy["r_fmt"] >= SFT_VALIDITY, greedy["completions"][:4]
    losses = sft["run"]["train_loss_per_step"]
    assert np.mean(losses[-10:]) < 0.25 * np.mean(losses[:10])


def test_grpo_raises_the_heldout_reward_with_a_bounded_kl(trained):
    run = trained["grpo"]
    curve = heldout_curve(run)
    assert [step for step, _ in curve] == [0, 4, 8, 12, 16, 20, 24]
    (_, start), (_, end) = curve[0], curve[-1]
    assert end - start > GRPO_MARGIN, curve
    steps = [s for s in run["step_log"] if s["step"] > 0]
    assert steps[0]["kl"] == 0.0  # the first update's policy is the reference (LoRA B starts at zero)
    kl = [s["kl"] for s in steps[1:]]
    assert all(0 < k < KL_BOUND for k in kl), kl  # the reference is not the policy itself
    for name in ("r_fmt", "r_acc", "s_morph", "heldout_r_fmt", "heldout_r_acc", "heldout_s_morph"):
        assert all(s[name] is None or 0 <= s[name] <= 1 for s in run["step_log"]), name
    assert run["reward_form"].startswith("mavic gated")
    from models.grpo import STEPS_SCHEMA, steps_table

    table = steps_table(run, "VLM GRPO (MAVIC)", "tiny", "rev")  # the lake's grpo_steps: a step 0 row, then 1..N
    assert table.schema == STEPS_SCHEMA and table.column("step").to_pylist() == list(range(GRPO_STEPS + 1))
    evaluated = [r["step"] for r in table.to_pylist() if r["heldout_reward"] is not None]
    assert evaluated == [step for step, _ in curve] and table.column("kl").to_pylist()[0] is None


def test_grpo_on_the_negated_reward_lowers_it(trained, task):
    from dataclasses import replace

    from models.morph_training import grpo_stage

    train, held_out = task
    config = replace(trained["config"], grpo_steps=8, eval_every=8, reward_sign=-1.0)
    run = grpo_stage(train, held_out, trained["sft"]["merged"], trained["work"], config)
    assert run["reward_form"].startswith("negated mavic gated")
    (_, start), (_, end) = heldout_curve(run)
    assert start == heldout_curve(trained["grpo"])[0][1]  # the same SFT model, the same draws
    assert end < start - GRPO_MARGIN, (start, end)


def test_the_adapter_off_is_the_sft_model(trained, task):
    import torch

    from models.grpo import sample_completions
    from models.morph_training import _load

    _, held_out = task
    rows = held_out.slice(0, 16).to_pylist()
    merged = trained["sft"]["merged"]
    sft_model, processor = _load(merged, "cpu")
    policy, _ = _load(merged, "cpu", trained["grpo"]["adapter_dir"])
    sft_texts = sample_completions(sft_model, processor, rows, greedy=True, max_new_tokens=48)
    with policy.disable_adapter():
        off_texts = sample_completions(policy, processor, rows, greedy=True, max_new_tokens=48)
    assert off_texts == sft_texts

    def loglik(model) -> torch.Tensor:
        """Log-likelihood of the SFT model's first greedy completion."""
        from models.morph_task import target_completion

        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": rows[0]["prompt"]}]}]
        from models.scorer_batches import open_rgb

        text = processor.apply_chat_template(messages, add_generation_prompt=True) + target_completion("MEL")
        batch = processor(text=[text], images=[[open_rgb(rows[0]["image_path"])]], return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits[0, :-1]
        return torch.log_softmax(logits, -1).gather(1, batch["input_ids"][0, 1:, None])[:, 0]

    sft_ll = loglik(sft_model)
    with policy.disable_adapter():
        assert torch.allclose(loglik(policy), sft_ll, atol=1e-5)
    assert not torch.allclose(loglik(policy), sft_ll, atol=1e-3)  # the adapter on: the GRPO policy


def test_the_benchmark_runs_without_duckdb_or_dagster(tmp_path):
    """benchmarks/training_curves.py on a prepared task imports only the GPU machine's packages."""
    from models.morph_task import build_task

    prepared = build_task(tmp_path / "task", n=60, seed=5)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import benchmarks.training_curves as curves; "
        "curves.main(['--task-dir', sys.argv[2], '--seeds', '0', '--sft-steps', '2', '--grpo-steps', '2', "
        "'--out-dir', sys.argv[3], '--name', 'smoke']); "
        "print('IMPORTED', sorted(m for m in ('duckdb', 'dagster', 'isic_metadata') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), str(prepared), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "IMPORTED []"
    table = (tmp_path / "out" / "smoke.csv").read_text().splitlines()
    assert table[0].startswith("seed,step,heldout_reward") and len(table) == 3  # steps 0 and 2
    assert (tmp_path / "out" / "smoke.png").stat().st_size > 0
