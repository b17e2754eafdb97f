"""VLM scoring benchmark: images/s of the likelihood scorer against the reference's loop, in one run.

On a CUDA machine it builds a realistic-size model from a config -- the Gemma3 multimodal architecture
of MedGemma 4B (SigLIP 896 px / 256 image tokens, Gemma3 text at hidden 2560, 8 heads, 262,208-token
vocabulary) at full width and reduced depth, random weights, bf16 -- and measures, on the same images:

* the baseline: the reference's scheme (spec 5.1), one image at a time, one padded 4-row pass with every
  position's logits (`method="reference"`, batch 1);
* the scorer (`method="shared_prefix"`: prompt once, key/value cache repeated over the 4 continuations)
  at batch sizes 1, 8, 32, and the padded-rows method batched (to separate batching from prefix sharing);
* the feature-extraction rate of a vision tower for the probe (CLIP ViT-L/14 at 336 px, full size);
* peak GPU memory of each measurement.

Everything is built from configs in the run; nothing is installed or downloaded. `--tiny` runs the same
code on the tiny CPU models (a smoke test, run by the test suite). Writes JSON and prints a table with
the machine (cores, free memory, load, device).

Usage: python benchmarks/gpu_scoring.py [--tiny] [--text-layers 8] [--vision-layers 8] [--images 64]
       [--baseline-images 16] [--batch-sizes 1 8 32] [--out gpu_scoring.json] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from autheval.vocabulary import RISK_LEVELS
from models import scorer, scorer_batches
from models.device import choose_device, describe_machine, dtype_for, dtype_name

# The published widths (MedGemma 4B, CLIP ViT-L/14 336 px): depth is set on the command line.
SHAPES = json.loads((Path(__file__).with_name("gpu_model_shapes.json")).read_text())
MEDGEMMA_TEXT = SHAPES["medgemma_text"]
MEDGEMMA_VISION = SHAPES["medgemma_vision"]
MEDGEMMA_FULL_DEPTH = SHAPES["medgemma_full_depth"]
CLIP_L14_336 = SHAPES["clip_l14_336"]
SITES = ("anterior torso", "lower extremity", "head/neck", "upper extremity", "posterior torso", None)


def realistic_gemma3(text_layers: int, vision_layers: int, device, dtype):
    """(model, processor): Gemma3ForConditionalGeneration at MedGemma 4B width, random weights, with a
    processor that makes 896 px pixel values and 256 image tokens (tokenizer: the tiny BPE, whose ids
    are a subset of the model's vocabulary; prompt length is within a few tokens of Gemma's)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    from models.tiny import GEMMA3_CHAT_TEMPLATE, GEMMA3_EXTRA, GEMMA3_SPECIALS, TURN_TOKENS, build_tokenizer

    tokenizer = build_tokenizer(GEMMA3_SPECIALS, GEMMA3_EXTRA, TURN_TOKENS)
    ids = tokenizer.convert_tokens_to_ids
    text = Gemma3TextConfig(
        **MEDGEMMA_TEXT,
        num_hidden_layers=text_layers,
        pad_token_id=ids("<pad>"),
        eos_token_id=ids("<eos>"),
        bos_token_id=ids("<bos>"),
    )
    vision = SiglipVisionConfig(**MEDGEMMA_VISION, num_hidden_layers=vision_layers)
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=256,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Gemma3ForConditionalGeneration(config)
    model = model.to(dtype).eval()
    image_processor = Gemma3ImageProcessorPil(
        size={"height": 896, "width": 896}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    processor = Gemma3Processor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=GEMMA3_CHAT_TEMPLATE, image_seq_length=256
    )
    return model, processor


def clip_tower(device, dtype, tiny_dir: Path | None):
    from transformers import CLIPVisionConfig, CLIPVisionModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    if tiny_dir is not None:
        from transformers import AutoImageProcessor

        model = CLIPVisionModel.from_pretrained(tiny_dir, dtype=dtype, local_files_only=True)
        return model.to(device).eval(), AutoImageProcessor.from_pretrained(tiny_dir, local_files_only=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = CLIPVisionModel(CLIPVisionConfig(**CLIP_L14_336))
    processor = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    return model.to(dtype).eval(), processor


def lesion_rows(n: int, seed: int = 20260711) -> list[dict]:
    """In-memory RGB images of ISIC-like size (600x450) with varied public metadata."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        base = rng.integers(60, 200, size=3)
        pixels = np.clip(base + rng.normal(0, 25, size=(450, 600, 3)), 0, 255).astype(np.uint8)
        rows.append(
            {
                "image_id": f"bench_{i:05d}",
                "image": Image.fromarray(pixels),
                "age": float(rng.choice([35.0, 50.0, 65.0, 80.0, np.nan])),
                "sex": str(rng.choice(["female", "male"])),
                "anatomic_site": SITES[i % len(SITES)],
            }
        )
    return rows


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gb(device) -> float | None:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return None


def time_scorer(model, processor, rows, batch_size: int, method: str, device) -> dict:
    """images/s of score_rows (decode + processor in the prefetch thread, forward passes) after one
    warm-up batch; the log-likelihoods come back for the agreement check."""
    list(scorer.score_rows(model, processor, rows[:batch_size], batch_size, method))  # warm-up
    _reset_peak(device)
    _sync(device)
    started = time.perf_counter()
    loglik = np.concatenate([ll for _, ll in scorer.score_rows(model, processor, rows, batch_size, method)])
    _sync(device)
    seconds = time.perf_counter() - started
    return {
        "method": method,
        "batch_size": batch_size,
        "images": len(rows),
        "seconds": round(seconds, 3),
        "images_per_s": round(len(rows) / seconds, 3),
        "peak_gpu_gb": _peak_gb(device),
        "loglik": loglik,
    }


def time_features(model, processor, rows, batch_size: int, device, dtype) -> dict:
    """Vision-tower features for the probe: preprocessing alone (one process) and the forward pass
    alone (pooled output), each in images/s."""
    pictures = [row["image"] for row in rows]
    started = time.perf_counter()
    pixel_batches = [
        processor(images=pictures[b : b + batch_size], return_tensors="pt")["pixel_values"]
        for b in range(0, len(pictures), batch_size)
    ]
    preprocess_s = time.perf_counter() - started
    with torch.inference_mode():
        model(pixel_values=pixel_batches[0].to(device, dtype))  # warm-up
        _reset_peak(device)
        _sync(device)
        started = time.perf_counter()
        dims = 0
        for pixels in pixel_batches:
            dims = model(pixel_values=pixels.to(device, dtype)).pooler_output.shape[-1]
        _sync(device)
    forward_s = time.perf_counter() - started
    return {
        "tower": type(model).__name__,
        "image_size": model.config.image_size,
        "layers": model.config.num_hidden_layers,
        "feature_dim": int(dims),
        "batch_size": batch_size,
        "images": len(rows),
        "forward_images_per_s": round(len(rows) / forward_s, 2),
        "preprocess_images_per_s_one_process": round(len(rows) / preprocess_s, 2),
        "peak_gpu_gb": _peak_gb(device),
    }


def run(args) -> dict:
    device = choose_device(args.device)
    dtype = dtype_for(device)
    machine = describe_machine(device)
    tiny_root = None
    if args.tiny:
        from models.tiny import ensure_tiny_model

        tiny_root = Path(args.tiny_dir or tempfile.mkdtemp(prefix="tiny-models-"))
        model_dir = ensure_tiny_model("tiny-gemma3", tiny_root)
        model, processor, device, dtype = scorer.load_model(str(model_dir), device=str(device))
        model_info = {"kind": "tiny-gemma3 (smoke test)", "dir": str(model_dir)}
    else:
        model, processor = realistic_gemma3(args.text_layers, args.vision_layers, device, dtype)
        model_info = {
            "kind": "Gemma3ForConditionalGeneration at MedGemma-4B width, random weights",
            "text_layers": args.text_layers,
            "vision_layers": args.vision_layers,
            "full_depth": MEDGEMMA_FULL_DEPTH,
            "text": MEDGEMMA_TEXT,
            "vision": MEDGEMMA_VISION,
        }
    model_info.update(
        parameters=sum(p.numel() for p in model.parameters()),
        dtype=dtype_name(dtype),
        image_tokens=getattr(processor, "image_seq_length", None),
        prompt_tokens=int(scorer_batches.prepare_batch(processor, lesion_rows(1))["input_ids"].shape[1]),
        continuation_tokens=[len(t) for t in scorer_batches.continuation_token_ids(processor)],
    )

    rows = lesion_rows(args.images)
    baseline_rows = rows[: args.baseline_images]
    results = [time_scorer(model, processor, baseline_rows, 1, "reference", device)]
    baseline = results[0]
    for batch_size in sorted({min(b, len(rows)) for b in args.batch_sizes}):
        results.append(time_scorer(model, processor, rows, batch_size, "shared_prefix", device))
    ablation = min(8, len(rows))
    results.append(time_scorer(model, processor, rows, ablation, "padded_rows", device))
    n_check = len(baseline_rows)
    agreement = max(float(np.abs(r["loglik"][:n_check] - baseline["loglik"]).max()) for r in results[1:])
    for r in results:
        r["speedup_vs_baseline"] = round(r["images_per_s"] / baseline["images_per_s"], 2)
        r.pop("loglik")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()

    tower, tower_processor = clip_tower(device, dtype, ensure_tiny_tower(tiny_root) if args.tiny else None)
    features = time_features(tower, tower_processor, rows, min(args.feature_batch, len(rows)), device, dtype)
    return {
        "benchmark": "gpu_scoring",
        "tiny": bool(args.tiny),
        "machine": machine,
        "model": model_info,
        "scorer": results,
        "baseline": "reference: batch 1, one padded 4-row pass per image, all logits",
        "max_abs_loglik_difference_vs_baseline": agreement,
        "vision_features": features,
        "process_peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "levels": list(RISK_LEVELS),
    }


def ensure_tiny_tower(tiny_root: Path) -> Path:
    from models.tiny import ensure_tiny_model

    return ensure_tiny_model("tiny-clip-vision", tiny_root)


def table(report: dict) -> str:
    m, model = report["machine"], report["model"]
    lines = [
        f"machine: {m['device']} ({m['device_name']}), {m['cores']} cores, load {m['load_1min']}, "
        f"free memory {m['free_memory_gb']} GB"
        + (f", GPU free {m['gpu_free_gb']}/{m['gpu_total_gb']} GB" if "gpu_free_gb" in m else ""),
        f"model: {model['kind']}, {model['parameters'] / 1e6:.1f}M parameters, {model['dtype']}, "
        f"prompt {model['prompt_tokens']} tokens, continuations {model['continuation_tokens']} tokens",
        "",
        f"{'method':<14} {'batch':>5} {'images':>6} {'seconds':>8} {'images/s':>9} {'x baseline':>10} "
        f"{'peak GPU GB':>11}",
    ]
    for r in report["scorer"]:
        peak = "-" if r["peak_gpu_gb"] is None else f"{r['peak_gpu_gb']:.2f}"
        lines.append(
            f"{r['method']:<14} {r['batch_size']:>5} {r['images']:>6} {r['seconds']:>8.2f} "
            f"{r['images_per_s']:>9.2f} {r['speedup_vs_baseline']:>10.2f} {peak:>11}"
        )
    f = report["vision_features"]
    lines += [
        "",
        f"max |loglik - baseline| over the baseline's images: {report['max_abs_loglik_difference_vs_baseline']:.2e}",
        f"vision tower ({f['tower']}, {f['image_size']} px, {f['layers']} layers, batch {f['batch_size']}): "
        f"forward {f['forward_images_per_s']:.1f} images/s, preprocessing "
        f"{f['preprocess_images_per_s_one_process']:.1f} images/s (one process), peak GPU GB "
        f"{f['peak_gpu_gb'] if f['peak_gpu_gb'] is not None else '-'}",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="the tiny CPU models (smoke test)")
    parser.add_argument("--tiny-dir", default=None, help="where to build the tiny models (default: a temp dir)")
    parser.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--text-layers", type=int, default=8, help="Gemma3 text layers (MedGemma 4B: 34)")
    parser.add_argument("--vision-layers", type=int, default=8, help="SigLIP layers (MedGemma 4B: 27)")
    parser.add_argument("--images", type=int, default=None, help="images per scorer measurement (64; tiny 8)")
    parser.add_argument("--baseline-images", type=int, default=None, help="images for the baseline (16; tiny 4)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--feature-batch", type=int, default=64, help="vision-tower batch size")
    parser.add_argument("--out", default="gpu_scoring.json", help="JSON report path")
    args = parser.parse_args(argv)
    if args.images is None:
        args.images = 8 if args.tiny else 64
    if args.baseline_images is None:
        args.baseline_images = 4 if args.tiny else 16
    args.baseline_images = min(args.baseline_images, args.images)
    if not args.tiny and args.device is None and choose_device().type != "cuda":
        parser.error(
            "no CUDA device: run with --tiny for the CPU smoke test (or --device cpu to run the "
            "realistic model on CPU, slowly)"
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(table(report))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
