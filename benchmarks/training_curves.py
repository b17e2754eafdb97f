"""Training curves of the SFT -> GRPO path on the tiny morphology task (models/morph_training.py): per
seed, a tiny VLM is fine-tuned until it writes DermoGPT's format, then trained by GRPO on MAVIC, and
MAVIC on held-out images is logged every few steps. Writes a table (CSV: one row per seed and evaluated
step, the reward and its terms apart, KL, the run's settings) and a plot (PNG) of the held-out reward
over steps for every seed, and prints the summary: the SFT model's greedy format-validity rate, each
seed's held-out reward at the start and the end of GRPO, their gain, and the seed-to-seed spread.

The task is built from the synthetic cohort (models/morph_task.py: needs the project's raw path) unless
`--task-dir` names a prepared one; with a prepared task the run imports only torch, transformers, peft,
trl (and datasets), numpy, pyarrow, PIL, pydantic and PyYAML, so it runs on a bare GPU machine:

  python benchmarks/training_curves.py --prepare-only --task-dir task      # here, once (the cohort)
  python benchmarks/training_curves.py --task-dir task --device cuda --hidden 512 --layers 4 --out-dir out

Usage: python benchmarks/training_curves.py [--seeds 0 1 2] [--task-dir DIR] [--prepare-only]
       [--device cpu|cuda] [--hidden H] [--layers L] [--sft-steps N] [--grpo-steps N] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

CURVE_COLUMNS = (
    "seed",
    "step",
    "heldout_reward",
    "heldout_r_fmt",
    "heldout_r_acc",
    "heldout_s_hier",
    "heldout_s_morph",
    "train_reward",
    "kl",
    "sft_format_validity",
    "sft_accuracy",
    "device",
    "hidden",
    "layers",
    "config_sha256",
)


def curve_rows(seed: int, result: dict, dims: tuple) -> list[dict]:
    """The held-out curve of one seed's run: step 0 (the SFT model) and every evaluated step."""
    sft = result["sft"]["heldout_greedy"]
    run = result["grpo"]
    rows = []
    for step in run["step_log"]:
        if step.get("heldout_reward") is None:
            continue
        rows.append(
            {
                "seed": seed,
                "step": step["step"],
                **{k: step[k] for k in CURVE_COLUMNS if k.startswith("heldout_")},
                "train_reward": step.get("reward"),
                "kl": step.get("kl"),
                "sft_format_validity": sft["r_fmt"],
                "sft_accuracy": sft["r_acc"],
                "device": run["device"],
                "hidden": dims[0],
                "layers": dims[1],
                "config_sha256": run["config_sha256"],
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Per seed: SFT validity, held-out reward at the start and end of GRPO and the gain; per evaluated
    step, across seeds: the held-out reward's mean and standard deviation (the seed-to-seed spread) and
    the gain's mean, standard deviation and minimum."""
    seeds = sorted({r["seed"] for r in rows})
    by = {(r["seed"], r["step"]): r for r in rows}
    steps = sorted({r["step"] for r in rows if all((s, r["step"]) in by for s in seeds)})
    per_seed = {}
    for seed in seeds:
        start, end = by[(seed, steps[0])], by[(seed, steps[-1])]
        kl = [r["kl"] for r in rows if r["seed"] == seed and r["kl"] is not None]
        per_seed[seed] = {
            "sft_format_validity": start["sft_format_validity"],
            "sft_accuracy": start["sft_accuracy"],
            "start": start["heldout_reward"],
            "end": end["heldout_reward"],
            "gain": end["heldout_reward"] - start["heldout_reward"],
            "max_kl_at_evaluated_steps": max(kl, default=None),
        }

    def sd(values) -> float:
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0

    per_step = {}
    for step in steps:
        reward = [by[(s, step)]["heldout_reward"] for s in seeds]
        gain = [by[(s, step)]["heldout_reward"] - by[(s, steps[0])]["heldout_reward"] for s in seeds]
        per_step[step] = {
            "reward_mean": float(np.mean(reward)),
            "reward_sd": sd(reward),
            "gain_mean": float(np.mean(gain)),
            "gain_sd": sd(gain),
            "gain_min": float(np.min(gain)),
        }
    return {"per_seed": per_seed, "per_step": per_step}


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for index, seed in enumerate(sorted({r["seed"] for r in rows})):
        colour = f"C{index}"
        curve = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["step"])
        steps = [r["step"] for r in curve]
        axes[0].plot(steps, [r["heldout_reward"] for r in curve], marker="o", color=colour, label=f"seed {seed}")
        axes[1].plot(steps, [r["heldout_r_fmt"] for r in curve], color=colour, label=f"seed {seed}: format")
        axes[1].plot(steps, [r["heldout_r_acc"] for r in curve], ls="--", color=colour, label=f"seed {seed}: accuracy")
    axes[0].set(xlabel="GRPO step", ylabel="held-out MAVIC reward (mean)", title="reward")
    axes[1].set(xlabel="GRPO step", ylabel="held-out mean", title="format validity and accuracy")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def machine(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.machine()} CPU, {os.cpu_count()} cores, load {load:.1f}, torch threads {torch.get_num_threads()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--task-dir", help="a prepared task folder (made by --prepare-only); default: built")
    parser.add_argument("--prepare-only", action="store_true", help="build the task into --task-dir and stop")
    parser.add_argument("--task-images", type=int, default=240, help="images of the synthetic cohort")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, help="text tower width (default: the tiny 32)")
    parser.add_argument("--layers", type=int, help="text tower depth (default: the tiny 2)")
    parser.add_argument("--sft-steps", type=int)
    parser.add_argument("--grpo-steps", type=int)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (tiny tensors: 1 is fastest)")
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="training_curves", help="file name stem of the outputs")
    args = parser.parse_args(argv)

    if args.prepare_only or args.task_dir is None:
        from models.morph_task import build_task

        task_dir = Path(args.task_dir or tempfile.mkdtemp(prefix="morph-task-"))
        build_task(task_dir, n=args.task_images)
        if args.prepare_only:
            print(f"task: {task_dir}")
            return 0
    else:
        task_dir = Path(args.task_dir)

    import torch

    from models.morph_task import read_task
    from models.morph_training import CurveConfig, training_curve

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    train, held_out = read_task(task_dir)
    overrides = {k: v for k, v in (("sft_steps", args.sft_steps), ("grpo_steps", args.grpo_steps)) if v is not None}
    rows, seconds = [], {}
    with tempfile.TemporaryDirectory(prefix="training-curves-") as work:
        for seed in args.seeds:
            config = CurveConfig(seed=seed, hidden=args.hidden, layers=args.layers, device=args.device, **overrides)
            started = time.perf_counter()
            result = training_curve(train, held_out, Path(work) / f"seed-{seed}", config)
            seconds[seed] = round(time.perf_counter() - started, 1)
            rows += curve_rows(seed, result, (args.hidden or 32, args.layers or 2))
            print(f"seed {seed}: {seconds[seed]} s", file=sys.stderr, flush=True)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{args.name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CURVE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    where = machine(args.device)
    config = CurveConfig(hidden=args.hidden, layers=args.layers, device=args.device, **overrides)
    title = (
        f"SFT {config.sft_steps} steps -> GRPO {config.grpo_steps} steps (group {config.group_size}, "
        f"lr {config.grpo_lr}, KL {config.kl_coef}); {train.num_rows} train / {config.heldout_images} held-out "
        f"images; text {args.hidden or 32}x{args.layers or 2}; {where}"
    )
    plot(rows, out / f"{args.name}.png", title)
    result = {
        "summary": summary(rows),
        "machine": where,
        "seconds_per_seed": seconds,
        "config": {k: v for k, v in config.__dict__.items() if k != "seed"},
        "command": "python benchmarks/training_curves.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
