"""Where a model runs and in what precision: bf16 on CUDA (the reference's dtype), fp32 on CPU (bf16
matmuls on CPU are slow and lose the 1e-5 agreement the tests check)."""

from __future__ import annotations

import os
import platform

import torch


def choose_device(prefer: str | None = None) -> torch.device:
    """`prefer` ('cuda', 'cpu', 'cuda:1') wins; otherwise CUDA when present, else CPU."""
    if prefer:
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def dtype_for(device: torch.device | str) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe_machine(device: torch.device | str | None = None) -> dict:
    """The machine a figure was measured on: cores, load, free memory, accelerator (for metadata and
    benchmark tables; a shared machine's load explains a slow number)."""
    device = torch.device(device) if device is not None else choose_device()
    info = {
        "device": str(device),
        "device_name": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "free_memory_gb": _free_memory_gb(),
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        info.update(
            device_name=torch.cuda.get_device_name(index),
            gpu_free_gb=round(free / 2**30, 1),
            gpu_total_gb=round(total / 2**30, 1),
            cuda=torch.version.cuda,
        )
    return info


def _free_memory_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def set_cpu_threads(n: int) -> int:
    """Set torch's intra-op CPU threads to `n` and return the previous count. The tiny models' operations
    are far too small to share between threads: on a busy 2-core machine one thread scores the synthetic
    demo's images faster (the second thread mostly spins)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    return previous


def quiet_transformers() -> None:
    """Keep transformers' per-file progress bars and notices off stderr: the scorer draws its own
    progress bar, and a demo's stderr is for the person watching the run."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
