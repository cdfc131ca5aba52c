"""On a CUDA GPU (skipped without one): every command end to end on a tiny model, and θ on the GPU equal to θ on the
CPU for every architecture family (float32, so the two differ only by kernel rounding)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import yaml
from tiny_model import FAMILIES, tiny_family_lm

from beliefdrift.backend import TransformersModel
from beliefdrift.cli.main import main
from beliefdrift.data.registry import load_dataset
from beliefdrift.diagnostics.kstep import kstep_exact
from beliefdrift.engine.methods import parse_method, run_methods_many
from beliefdrift.engine.resampling import QuestionRunner

pytestmark = pytest.mark.cuda

TINY = ["-J", "3", "-N", "3"]


def on(lm: TransformersModel, device: str) -> TransformersModel:
    return TransformersModel(lm.model.to(device), lm.tokenizer, lm.name)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_theta_on_the_gpu_equals_theta_on_the_cpu(family, question, history_template):
    """The same histories (seeds, answers, padding) give the same θ and exact k-step predictives on both devices."""
    seeds = torch.tensor([[0, 1], [2, 2], [3, 0]])
    results = []
    for lm in (tiny_family_lm(family), on(tiny_family_lm(family), "cuda")):
        runner = QuestionRunner(lm, question, history_template)
        batch = runner.paths(3, seeds)
        batch.advance(torch.tensor([1, 3, 2]))
        results.append((batch.dist.probs.cpu(), batch.dist.valid_mass.cpu(), kstep_exact(batch, 3).probs))
    for cpu, gpu in zip(*results, strict=True):
        torch.testing.assert_close(gpu.to(cpu.dtype), cpu, atol=1e-4, rtol=0)


def test_answer_steps_never_wait_for_the_gpu(history_template):
    """No host synchronisation inside the step loop (sampling, seeds, answers and θ stay on the device): the
    synchronising calls of a batch of questions (prefills, the results' copy) do not grow with the answers per path.
    (`test_engine` checks the host reads on any machine; this sees every synchronisation, copies to the GPU too.)"""
    lm = on(tiny_family_lm("llama"), "cuda")
    questions = load_dataset("demo", n=2, seed=0)
    methods = [parse_method(m) for m in ("ppr", "ppr-seed1", "ppr-seed2")]

    def synchronisations(steps: int) -> int:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run_methods_many(lm, questions, methods, paths=4, steps=steps, seed=0, template=history_template)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    synchronisations(2)  # one-time work: the probe pass, caches
    fewer = synchronisations(6)
    assert fewer > 0, "the results' copy to the host synchronises: the count must see it"
    assert synchronisations(12) == fewer


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_command_runs_on_the_gpu(tiny_model_dir: Path, history_template: str, tmp_path: Path, dtype: str):
    model = ["--model", str(tiny_model_dir), "--device", "cuda", "--dtype", dtype, "--template", history_template]
    data = ["--dataset", "demo", "-n", "2"]
    assert main(["evaluate", *model, *data, *TINY, "--methods", "direct", "ppr", "ppr-seed1", "--bootstrap", "10",
                 "--batch-questions", "2", "--out", str(tmp_path / "evaluate")]) == 0
    assert main(["report", str(tmp_path / "evaluate"), "--bootstrap", "10"]) == 0
    assert main(["drift", *model, *data, *TINY, "--methods", "ppr", "ppr-seed1", "--out", str(tmp_path / "drift")]) == 0
    assert main(["emd", *model, *data, *TINY, "--methods", "ppr", "--horizon", "3", "--prefix-lengths", "0", "1",
                 "--burn-in", "1", "--lookahead", "3", "--out", str(tmp_path / "emd")]) == 0
    assert main(["reasoning", *model[:6], *data, "-J", "2", "-N", "1", "-m", "1", "--tau", "1",
                 "--max-new-tokens", "24", "--seed-max-new-tokens", "12", "--out", str(tmp_path / "reasoning")]) == 0
    assert main(["demo", *model, "--n", "2", *TINY, "--emd-questions", "1", "--reasoning-questions", "1",
                 "--out", str(tmp_path / "demo")]) == 0


@pytest.mark.parametrize("anchor", [0.0, 1.0])
def test_train_command_runs_on_the_gpu(tiny_model_dir: Path, history_template: str, tmp_path: Path, anchor: float):
    preset = {"model": str(tiny_model_dir), "template": history_template, "dataset": "demo", "n": 1,
              "prefix_lengths": [2], "paths": 8, "micro_batch": 4, "grad_accum": 2, "epochs": 1,
              "steps_per_group": 2, "warmup_steps": 0, "eval_n": 0, "device": "cuda", "dtype": "bfloat16"}
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(preset))
    out = tmp_path / "train"
    assert main(["train", "--config", str(config), "--out", str(out), "--anchor", str(anchor)]) == 0
    assert (out / "adapter").is_dir()
