"""The GPU scoring benchmark's CPU smoke path (--tiny): it runs end to end, writes its JSON report and
prints the table; the scorer's numbers agree with the reference baseline on the same images."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")


def test_gpu_benchmark_smoke_on_cpu(tmp_path, capsys):
    from benchmarks import gpu_scoring

    out = tmp_path / "report.json"
    assert (
        gpu_scoring.main(
            [
                "--tiny",
                "--tiny-dir",
                str(tmp_path / "models"),
                "--images",
                "2",
                "--baseline-images",
                "2",
                "--batch-sizes",
                "1",
                "2",
                "32",
                "--feature-batch",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    rows = {(r["method"], r["batch_size"]): r for r in report["scorer"]}
    assert set(rows) == {("reference", 1), ("shared_prefix", 1), ("shared_prefix", 2), ("padded_rows", 2)}
    assert rows[("reference", 1)]["speedup_vs_baseline"] == 1.0
    assert all(r["images_per_s"] > 0 and r["images"] == 2 for r in report["scorer"])
    assert report["max_abs_loglik_difference_vs_baseline"] < 1e-5
    assert report["vision_features"]["forward_images_per_s"] > 0
    assert report["vision_features"]["feature_dim"] == 32
    assert report["machine"]["device"] == "cpu" and report["machine"]["cores"] >= 1
    assert report["model"]["image_tokens"] == 4 and report["model"]["prompt_tokens"] > 100
    printed = capsys.readouterr().out
    assert "images/s" in printed and "x baseline" in printed and "cores" in printed


def test_gpu_benchmark_refuses_a_missing_gpu_without_tiny(monkeypatch):
    import torch

    from benchmarks import gpu_scoring

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu_scoring.parse_args([])
