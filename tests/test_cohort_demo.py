"""`autheval demo --source synthetic`: results alone on stdout, and a default cohort whose evaluated
split is large enough for the intervals, subgroups and fairness rows it prints (issue 16, items 8-9)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_a_synthetic_demo_with_models_writes_only_results_to_stdout(tmp_path):
    """accelerate imports deepspeed in every save_pretrained; left to guess its accelerator, deepspeed
    logs a warning to stdout. The demo names the accelerator first, so stdout starts with the results."""
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # as a user's shell has it
    env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run([sys.executable, "-m", "autheval", "demo", "--source", "synthetic", "--n", "40",
                             "--reps", "200", "--lake", str(tmp_path / "lake")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Model mechanisms on" in result.stderr  # the model path ran (and imported deepspeed)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("asset checks: "), lines[:3]
    assert not any("WARNING" in line or "DeepSpeed" in line or "accelerator" in line for line in lines), \
        [line for line in lines if "WARNING" in line]


def test_the_fine_tune_names_the_accelerator_and_moves_deepspeed_logs_to_stderr():
    """The fine-tune's own path: the accelerator named before deepspeed is imported (a value already set
    is kept), and DeepSpeed's logger, which writes to stdout, moved to stderr after the import."""
    code = (
        "import logging, os\n"
        "from models.finetune import name_deepspeed_accelerator, deepspeed_logs_to_stderr\n"
        "os.environ['DS_ACCELERATOR'] = 'cpu'; name_deepspeed_accelerator('cuda')\n"
        "assert os.environ['DS_ACCELERATOR'] == 'cpu'\n"
        "del os.environ['DS_ACCELERATOR']; name_deepspeed_accelerator('cpu')\n"
        "import deepspeed\n"
        "deepspeed_logs_to_stderr()\n"
        "logging.getLogger('DeepSpeed').warning('a deepspeed warning')\n"
        "print(os.environ['DS_ACCELERATOR'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "cpu\n"
    assert "a deepspeed warning" in result.stderr
