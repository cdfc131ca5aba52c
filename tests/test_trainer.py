"""SC fine-tuning: differentiable conditionals, rollout datasets, the trainer, resume (after SIGKILL and SIGINT:
test_faults.py), DDP.

Run as a script under `torch.distributed.run`, this file is the worker of the two-process test.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from servers import MadeUpModel
from transformers.modeling_layers import GradientCheckpointingLayer

from beliefdrift.amortize.backward import SavedTensorMeter, backward_sc_loss
from beliefdrift.amortize.forward import conditionals
from beliefdrift.amortize.loss import SelfConsistencyLoss, expected_sc_loss
from beliefdrift.amortize.rollouts import (
    RolloutGroup,
    generate_groups,
    group_id,
    group_title,
    load_rollouts,
    sample_prefix,
    sample_rollouts,
    save_rollouts,
)
from beliefdrift.amortize.trainer import SCTrainer, TrainConfig, plan_updates
from beliefdrift.backend import load_model
from beliefdrift.config.options import load_settings
from beliefdrift.data.registry import fingerprint, load_dataset
from beliefdrift.diagnostics.emd import kstep_drift
from beliefdrift.diagnostics.kstep import kstep_exact
from beliefdrift.engine.resampling import QuestionRunner, draw_seeds, make_generator, ppr_tokens, sample_answers
from beliefdrift.errors import UserError
from beliefdrift.runs.distributed import leave_run

ROOT = Path(__file__).resolve().parents[1]
SHORT_TEMPLATE = "Answer with letters among ({choice_str}), one per line, {gen_len} lines.\n{question}\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A short PPR template, so the tiny byte-level model's prompts stay ~150 tokens."""
    path = tmp_path_factory.mktemp("template") / "short.txt"
    path.write_text(SHORT_TEMPLATE)
    return str(path)


def tiny_config(model_dir: Path, template: str, **changes: object) -> TrainConfig:
    # float32 unless a test asks otherwise: dtype "auto" is bf16 on CPUs with AMX or AVX512-BF16, whose rounding
    # (~1e-2 relative) depends on the batch shapes, so gradients at different micro-batch sizes would differ.
    base = TrainConfig(model=str(model_dir), template=template, dataset="demo", n=1, prefix_lengths=[2],
                       paths=8, micro_batch=4, grad_accum=2, epochs=1, steps_per_group=6, warmup_steps=0,
                       learning_rate=1e-2, eval_n=0, save_steps=100, dtype="float32")
    return replace(base, **changes)


def assert_conditionals_match_engine(lm, question, template: str, prefix: list[int]) -> None:
    runner = QuestionRunner(lm, question, template)
    paths = 5
    batch = runner.paths(paths, seeds=torch.tensor(prefix, dtype=torch.long).reshape(1, -1).expand(paths, -1))
    rollouts, thetas, masses = sample_answers(batch, 4, make_generator(0, "conditionals"))
    log_thetas, log_mass = conditionals(lm.model, ppr_tokens(lm, question, template), prefix, rollouts, micro_batch=2)
    assert log_thetas.shape == thetas.shape and log_thetas.requires_grad
    torch.testing.assert_close(log_thetas.detach().exp(), thetas, atol=1e-4, rtol=0)
    torch.testing.assert_close(log_mass.detach().exp(), masses, atol=1e-4, rtol=0)


@pytest.mark.parametrize("prefix", [[], [1, 2, 0]])
def test_differentiable_conditionals_equal_pathbatch_theta(tiny_lm, question, template, prefix):
    assert_conditionals_match_engine(tiny_lm, question, template, prefix)


@pytest.mark.integration
def test_differentiable_conditionals_equal_pathbatch_theta_default_model(default_lm, question):
    assert_conditionals_match_engine(default_lm, question, "ppr-llama", [1, 3])


def test_rollout_dataset_round_trip_and_determinism(tiny_lm, question, template, tmp_path):
    groups = generate_groups(tiny_lm, [question], (0, 3), num_rollouts=6, depth=4, seed=3, template=template)
    again = generate_groups(tiny_lm, [question], (0, 3), num_rollouts=6, depth=4, seed=3, template=template)
    assert [g.id for g in groups] == [group_id(question.id, ()), group_id(question.id, groups[1].prefix)]
    assert len(groups[1].prefix) == 3 and groups[0].rollouts.shape == (6, 4)
    for g, h in zip(groups, again, strict=True):
        assert g.prefix == h.prefix and torch.equal(g.rollouts, h.rollouts)
    assert len({tuple(r) for r in groups[0].rollouts.tolist()}) > 1, "paths are sampled independently"
    directory = save_rollouts(groups, tmp_path / "rollouts", {"seed": 3})
    loaded, settings = load_rollouts(directory)
    assert settings == {"seed": 3}
    assert [(g.id, g.question, g.prefix) for g in loaded] == [(g.id, g.question, g.prefix) for g in groups]
    assert all(torch.equal(g.rollouts, h.rollouts) for g, h in zip(loaded, groups, strict=True))
    assert all(torch.allclose(g.forecast, h.forecast, atol=1e-7) for g, h in zip(loaded, groups, strict=True))
    rows = (directory / "rollouts.jsonl").read_text().splitlines()
    assert len(rows) == 12 and json.loads(rows[0])["group"] == groups[0].id
    edited = json.loads(rows[0])  # one answer of one path, still a valid label: only the checksum can tell
    edited["rollout"][0] = (edited["rollout"][0] + 1) % len(question.choices)
    (directory / "rollouts.jsonl").write_text("\n".join([json.dumps(edited), *rows[1:]]) + "\n")
    with pytest.raises(ValueError, match="rollouts.jsonl does not match its checksum in meta.json"):
        load_rollouts(directory)


def test_direct_prefixes_are_iid_draws_from_the_direct_query(tiny_lm, question, template):
    """prefix_mode direct (the paper's seeding prompt, App. D.4): a_{1:n} i.i.d. from the direct-query θ, drawn as
    seed answers are; sample (the default) walks the PPR process instead."""
    runner = QuestionRunner(tiny_lm, question, template)
    (group,) = generate_groups(tiny_lm, [question], (6,), num_rollouts=2, depth=2, seed=4, template=template,
                               prefix_mode="direct")
    expected = draw_seeds(runner.direct.probs, 1, 6, make_generator(4, question.id, 6, "prefix", "direct"))[0]
    assert group.prefix == tuple(expected.tolist())
    draws = torch.tensor([sample_prefix(runner, 400, "direct", make_generator(0, "many"))]).flatten()
    frequencies = torch.bincount(draws, minlength=runner.direct.probs.shape[-1]) / 400
    assert float((frequencies - runner.direct.probs.flatten().double()).abs().sum()) < 0.2
    assert TrainConfig(prefix_mode="direct").prefix_mode == "direct" and TrainConfig().prefix_mode == "sample"


def test_group_forecast_is_the_exact_k_step_predictive_in_expectation(tiny_lm, question, template):
    # f = mean_j θ(· | a_{1:n}, A^{(j)}) over sampled rollouts is a Monte Carlo estimate of p^(K); K = 3 here.
    (group,) = generate_groups(tiny_lm, [question], (1,), num_rollouts=400, depth=2, seed=0, template=template)
    runner = QuestionRunner(tiny_lm, question, template)
    exact = kstep_exact(runner.paths(1, seeds=torch.tensor([group.prefix])), 3).probs[0, 2]
    assert group.forecast.shape == exact.shape
    assert float((group.forecast - exact.double()).abs().sum()) < 0.05


def test_anchor_needs_rollouts_with_final_thetas(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template), out=tmp_path / "run")
    groups, settings = load_rollouts(tmp_path / "run" / "rollouts")
    save_rollouts([replace(g, final_thetas=None) for g in groups], tmp_path / "old", settings)
    with pytest.raises(ValueError, match="final θ"):
        SCTrainer(config=tiny_config(tiny_model_dir, template, anchor=1.0, rollout_dir=str(tmp_path / "old")),
                  out=tmp_path / "b")
    assert trainer.groups[0].forecast is not None


def test_the_trainer_takes_questions_and_a_model_as_objects(tiny_model_dir, template, tmp_path):
    """As TRL's trainers take a dataset and a model: the rollouts are those of the questions given (their
    fingerprint pinned), sampled from the model given; every question given is trained on, so validation needs
    questions of its own."""
    questions = load_dataset("demo", n=3)[1:]
    lm = load_model(str(tiny_model_dir), dtype="float32")  # (LoRA goes into its modules: not the shared fixture)
    with pytest.raises(UserError, match=r"name the validation questions with eval_dataset= \(or set eval_n=0\)"):
        SCTrainer(questions=questions, lm=lm, config=tiny_config(tiny_model_dir, template), eval_n=2, out=tmp_path)
    trainer = SCTrainer(questions=questions, lm=lm, config=tiny_config(tiny_model_dir, template), out=tmp_path / "run")
    assert [group.question for group in trainer.groups] == questions and trainer.config.out == tmp_path / "run"
    _, settings = load_rollouts(tmp_path / "run" / "rollouts")
    assert (settings["dataset"], settings["n"], settings["questions_sha256"]) == ("questions", None,
                                                                                 fingerprint(questions))


def test_the_trainer_refuses_a_served_model(template, tiny_model_dir, tmp_path):
    """A model behind an inference server gives no gradients: `SCTrainer(lm=…)` refuses it in one line before it
    samples a rollout, as `beliefdrift train --model openai:…` does (tests/test_served.py)."""
    with MadeUpModel(str(tiny_model_dir), vocab=256) as url:  # a vLLM-shaped server of the tiny model's tokenizer
        lm = load_model(f"openai:{url}")
        with pytest.raises(UserError, match="train needs the model's gradients"):
            SCTrainer(lm=lm, template=template, dataset="demo", n=1, eval_n=0, out=tmp_path / "run")
    assert not (tmp_path / "run" / "rollouts").exists()


def test_the_plan_stops_at_max_steps_and_refuses_one_that_would_not_end(monkeypatch):
    import beliefdrift.amortize.trainer as trainer

    drawn = []
    real = trainer.make_generator
    monkeypatch.setattr(trainer, "make_generator", lambda *keys: drawn.append(keys) or real(*keys))
    plan = plan_updates(3, TrainConfig(epochs=10**7, max_steps=2))
    assert [u.step for u in plan] == [1, 2] and len(drawn) == 1  # one epoch's order drawn, not ten million
    with pytest.raises(UserError, match=r"--epochs 10000000 × 100 groups per process × --steps-per-group 10 = "
                                        r"10000000000 updates, more than 10000000; lower them or set --max-steps"):
        plan_updates(100, TrainConfig(epochs=10**7, steps_per_group=10))


def test_update_plan_shards_groups_and_repeats_each_group_u_times():
    config = TrainConfig(epochs=2, steps_per_group=3)
    plans = [plan_updates(5, config, rank, 2) for rank in range(2)]
    assert [len(p) for p in plans] == [18, 18]  # ceil(5 / 2) groups × U × epochs
    first_epoch = [u.group for p in plans for u in p if u.epoch == 0 and u.u == 0]
    assert set(first_epoch) == set(range(5)), "every group is trained in every epoch"
    assert [u.step for u in plans[0]] == list(range(1, 19))
    assert [(u.epoch, u.group, u.u) for u in plans[0][:3]] == [(0, plans[0][0].group, u) for u in range(3)]


def test_only_lora_parameters_receive_gradients(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template), out=tmp_path)
    group = trainer.groups[0]
    rollouts = group.rollouts[:, :4]
    log_thetas, _ = conditionals(trainer.model, trainer.tokens(group.question), group.prefix, rollouts, 4)
    SelfConsistencyLoss()(log_thetas, rollouts, 3, 5).loss.backward()
    named = dict(trainer.model.named_parameters())
    with_grad = {name for name, p in named.items() if p.grad is not None}
    assert with_grad and all("lora_" in name for name in with_grad)
    assert any(float(p.grad.abs().sum()) > 0 for name, p in named.items() if "lora_B" in name)
    assert all(not p.requires_grad for name, p in named.items() if "lora_" not in name)


def move_lora_b(trainer: SCTrainer) -> None:
    """Random lora_B (initialised 0), so that lora_A receives gradient too."""
    with torch.no_grad():
        for name, p in trainer.peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=make_generator(0, name))


def lora_gradient(trainer: SCTrainer, rollouts: torch.Tensor, micro_batch: int, caching: bool,
                  meter: SavedTensorMeter | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every parameter gradient of one update's loss at k = (3, 6), with fixed dropout masks, and the loss."""
    group = trainer.groups[0]
    forecast = group.forecast

    def loss_fn(c):
        return trainer.loss(c.log_theta, rollouts, 3, 6, forecast, c.log_mass)

    trainer.model.train()  # dropout on
    torch.manual_seed(7)
    with meter or SavedTensorMeter():
        out = backward_sc_loss(trainer.model, trainer.tokens(group.question), group.prefix, rollouts, loss_fn,
                               micro_batch, caching)
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.optimizer.zero_grad(set_to_none=True)
    return grads, out.loss.detach()


@pytest.mark.parametrize(("scope", "dropout"), [("update", 0.0), ("update", 0.2), ("micro_batch", 0.2)])
def test_gradient_caching_gives_the_one_graph_gradient(tiny_model_dir, template, tmp_path, scope, dropout):
    # Anchor, format and PG terms on, micro-batches of 1, 3 (uneven: 3 + 3 + 2) and 8 paths. With dropout each
    # micro-batch replays its own masks; without it the gradient does not depend on the micro-batch size either.
    config = tiny_config(tiny_model_dir, template, anchor=1.0, format_weight=0.5, beta=0.5, lora_dropout=dropout,
                         predictive_scope=scope)
    trainer = SCTrainer(config=config, out=tmp_path)
    move_lora_b(trainer)
    rollouts = trainer.groups[0].rollouts
    reference, _ = lora_gradient(trainer, rollouts, 8, caching=False)
    assert len(reference) == sum("lora_" in name for name, _ in trainer.model.named_parameters())
    assert all(float(g.abs().sum()) > 0 for g in reference.values())
    for micro_batch in (1, 3, 8):
        trainer.loss.predictive_paths = micro_batch if scope == "micro_batch" else None
        one_graph, loss = lora_gradient(trainer, rollouts, micro_batch, caching=False)
        cached, cached_loss = lora_gradient(trainer, rollouts, micro_batch, caching=True)
        assert cached.keys() == one_graph.keys()
        assert torch.equal(cached_loss, loss)
        for name, grad in one_graph.items():
            assert torch.equal(cached[name], grad), f"{name}: not the one-graph gradient bit for bit ({micro_batch})"
            if scope == "update" and not dropout:
                torch.testing.assert_close(grad, reference[name], atol=1e-5, rtol=1e-5)


def test_gradient_caching_memory_does_not_grow_with_the_paths(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template, paths=16), out=tmp_path)
    rollouts = trainer.groups[0].rollouts
    peaks = {}
    for caching in (False, True):
        for paths in (4, 16):
            meter = SavedTensorMeter(trainer.model)
            lora_gradient(trainer, rollouts[:paths], 2, caching, meter)
            peaks[caching, paths] = meter.peak
            assert meter.current == 0, "every graph is freed after the update"
    assert peaks[False, 16] > 1.3 * peaks[False, 4], "one graph holds every path"
    assert peaks[True, 16] < 1.02 * peaks[True, 4], "caching holds the prefix and one micro-batch"
    assert peaks[True, 16] < 0.8 * peaks[False, 16]


def test_gradient_checkpointing_gives_the_same_gradient(tiny_model_dir, template, tmp_path):
    gradients = []
    for checkpointing in (False, True):
        config = tiny_config(tiny_model_dir, template, anchor=1.0, format_weight=0.5, lora_dropout=0.2,
                             gradient_checkpointing=checkpointing)
        trainer = SCTrainer(config=config, out=tmp_path / str(checkpointing))
        move_lora_b(trainer)
        layers = [m for m in trainer.peft_model.modules() if isinstance(m, GradientCheckpointingLayer)]
        assert len(layers) == 2 and all(layer.gradient_checkpointing == checkpointing for layer in layers)
        # Every run of a layer's attention, grad mode on or off. A checkpointed layer runs again in the backward pass
        # (its recompute calls the layer's modules, not the layer's checkpointing wrapper): what is counted does not
        # depend on whether transformers routes the passes without gradients through the checkpoint function (5.23
        # did, 5.24 does not).
        runs = []
        for layer in layers:
            layer.self_attn.register_forward_pre_hook(lambda *_, r=runs: r.append(torch.is_grad_enabled()))
        gradients.append(lora_gradient(trainer, trainer.groups[0].rollouts, 3, caching=True)[0])
        assert runs.count(False) == 2 * 3, "3 micro-batches without gradients, 2 layers"
        assert runs.count(True) == 2 * (1 + 3) * (2 if checkpointing else 1), (
            "prefix + 3 micro-batches with gradients, 2 layers, each run again in the backward pass when checkpointed")
    assert gradients[0].keys() == gradients[1].keys()
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, atol=1e-6, rtol=1e-5)


def test_anchor_off_never_computes_the_forecast(tiny_model_dir, template, tmp_path, monkeypatch):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template, format_weight=0.5), out=tmp_path)
    monkeypatch.setattr(RolloutGroup, "forecast", property(lambda group: pytest.fail("forecast computed at λ = 0")))
    row = trainer.update(trainer.updates[0])
    assert math.isnan(row["anchor"]) and math.isfinite(row["loss"]) and row["format"] > 0


def test_bf16_update_keeps_the_loss_in_float32(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template, dtype="bfloat16", anchor=1.0, format_weight=0.5),
                        out=tmp_path)
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    seen = []
    loss = trainer.loss
    trainer.loss = lambda *args: seen.append(loss(*args)) or seen[-1]
    row = trainer.update(trainer.updates[0])
    assert all(t.dtype == torch.float32 for t in seen[0]) and math.isfinite(row["loss"]) and row["anchor"] > 0


@pytest.mark.parametrize("max_grad_norm", [0.0, None, 0.5])
def test_max_grad_norm_clips_the_update_gradient_or_not(tiny_model_dir, template, tmp_path, max_grad_norm):
    # Every gradient entry set to 1: norm √n. AdamW's first moment after one step is (1 − β1) · g_clipped, with
    # g_clipped = g · 0.5 / (√n + 1e-6) under max_grad_norm 0.5 and g itself under 0 or None.
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template, max_grad_norm=max_grad_norm), out=tmp_path)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.ones_like(p)
    n = sum(p.numel() for p in params)
    assert trainer.optimizer_step() == pytest.approx(math.sqrt(n), rel=1e-5), "the norm is logged either way"
    expected = 0.1 * (0.5 / (math.sqrt(n) + 1e-6) if max_grad_norm else 1.0)
    for p in params:
        moment = trainer.optimizer.state[p]["exp_avg"]
        torch.testing.assert_close(moment, torch.full_like(moment, expected), rtol=1e-5, atol=0)
        assert p.grad is None


def test_tampered_checkpoint_is_refused_without_running_it(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template), out=tmp_path / "run")
    checkpoint = trainer.save_checkpoint(1)
    assert trainer.load_checkpoint(checkpoint) == 1
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"state": Payload(), "param_groups": []}, checkpoint / "optimizer.rank0.pt")
    with pytest.raises(ValueError, match=r"optimizer\.rank0\.pt changed since it was written"):
        trainer.load_checkpoint(checkpoint)  # its manifest tells first
    (checkpoint / "checksums.json").unlink()  # a checkpoint written before the manifest: the file itself is refused
    with pytest.raises(ValueError, match=r"optimizer\.rank0\.pt: refused to load.*GLOBAL posix\.system"):
        trainer.load_checkpoint(checkpoint)
    assert not marker.exists(), "the pickled call never ran"


def test_a_diverging_update_stops_training_naming_the_flags(tiny_model_dir, template, tmp_path):
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template, learning_rate=1.0), out=tmp_path)
    trainer.optimizer.param_groups[0]["lr"] = math.inf  # a finite loss, then weights that are not
    with pytest.raises(UserError, match="step 1: the adapter's weights are not finite: training diverged; lower "
                                        r"--learning-rate \(1\) or the loss weights --beta \(0.01\)"):
        trainer.update(trainer.updates[0])
    with pytest.raises(UserError, match="step 2: the loss is nan: training diverged"):  # what those weights give
        trainer.update(trainer.updates[1])


def test_checkpoint_files_are_checked_against_their_manifest(tiny_model_dir, template, tmp_path):
    """A step edited in state.json, or one changed weight, would resume to another adapter without a word."""
    trainer = SCTrainer(config=tiny_config(tiny_model_dir, template), out=tmp_path / "run")
    checkpoint = trainer.save_checkpoint(1)
    assert trainer.load_checkpoint(checkpoint) == 1
    state = checkpoint / "state.json"
    original = state.read_text()
    state.write_text(original.replace('"step": 1', '"step": 2'))
    with pytest.raises(UserError, match=r"checkpoint-000001: not a readable checkpoint \(ValueError: state.json "
                                        r"changed since it was written"):
        trainer.load_checkpoint(checkpoint)
    state.write_text(original)
    weights = checkpoint / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 1  # the low mantissa byte of the last weight: still a number
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"adapter/adapter_model.safetensors changed since it was written"):
        trainer.load_checkpoint(checkpoint)
    (checkpoint / "checksums.json").unlink()  # a checkpoint written before the manifest: its step is still checked
    state.write_text(original.replace('"step": 1', '"step": 2'))
    with pytest.raises(UserError, match="state.json says step 2, the checkpoint's name 1"):
        trainer.load_checkpoint(checkpoint)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("anchor", [0.0, 1.0])
def test_training_on_cuda(tiny_model_dir, template, tmp_path, dtype, anchor):
    config = tiny_config(tiny_model_dir, template, device="cuda", dtype=dtype, anchor=anchor, format_weight=0.5,
                         steps_per_group=2)
    trainer = SCTrainer(config=config, out=tmp_path)
    assert next(trainer.model.parameters()).device.type == "cuda"
    rows = [trainer.update(u) for u in trainer.updates]
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert all(math.isnan(r["anchor"]) != bool(anchor) for r in rows)
    assert any(float(p.abs().sum()) > 0 for n, p in trainer.peft_model.named_parameters() if "lora_B" in n)


def test_update_rollouts_offline_subset_and_on_policy(tiny_model_dir, template, tmp_path):
    offline = SCTrainer(config=tiny_config(tiny_model_dir, template, micro_batch=2, grad_accum=2),
                        out=tmp_path / "offline")
    group = offline.groups[0]
    subset = offline.update_rollouts(group, make_generator(0, "subset"), 3)
    assert subset.shape == (4, 3)
    stored = {tuple(r) for r in group.rollouts[:, :3].tolist()}
    assert all(tuple(r) in stored for r in subset.tolist()), "offline updates use stored base-model rollouts"

    config = tiny_config(tiny_model_dir, template, mode="on-policy", rollout_dir=str(tmp_path / "offline" / "rollouts"))
    trainer = SCTrainer(config=config, out=tmp_path / "on-policy")
    with torch.no_grad():  # move the adapter away from the base model, so "current model" is observable
        for name, p in trainer.peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=make_generator(0, name))
    fresh = trainer.update_rollouts(group, make_generator(0, "fresh"), 5)
    assert trainer.peft_model.training, "the model is back in training mode after sampling"
    trainer.peft_model.eval()  # sampling uses the current model without dropout
    runner = QuestionRunner(trainer.current_lm(), group.question, template)
    expected, _ = sample_rollouts(runner, group.prefix, 8, 5, make_generator(0, "fresh"))
    assert torch.equal(fresh, expected), "on-policy rollouts are sampled from the current (tuned) model"
    with trainer.peft_model.disable_adapter():
        base, _ = sample_rollouts(QuestionRunner(trainer.current_lm(), group.question, template), group.prefix, 8,
                                  5, make_generator(0, "fresh"))
    assert not torch.equal(fresh, base), "… not from the base model"


def test_short_training_run_lowers_sc_loss_and_emd_on_its_group(tiny_model_dir, template, tmp_path):
    config = tiny_config(tiny_model_dir, template, lora_dropout=0.0, steps_per_group=12, learning_rate=5e-2)
    trainer = SCTrainer(config=config, out=tmp_path)
    group = trainer.groups[0]

    @torch.no_grad()
    def measure() -> tuple[float, float]:
        trainer.peft_model.eval()
        log_thetas, _ = conditionals(trainer.model, trainer.tokens(group.question), group.prefix, group.rollouts)
        runner = QuestionRunner(trainer.current_lm(), group.question, template)
        predictive = kstep_exact(runner.paths(1, seeds=torch.tensor([group.prefix])), 4)
        return float(expected_sc_loss(log_thetas)), float(kstep_drift(predictive.probs, "l1").mean())

    sc_before, emd_before = measure()
    trainer.train()
    sc_after, emd_after = measure()
    assert sc_after < 0.5 * sc_before
    assert emd_after < 0.5 * emd_before
    with open(tmp_path / "log.csv", newline="") as log:
        rows = list(csv.DictReader(log))
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    assert all(float(r["loss"]) == pytest.approx(float(r["sc"]) + 0.01 * float(r["pg"]), abs=1e-5) for r in rows)
    assert all(math.isnan(float(r["anchor"])) for r in rows), "not computed at λ = 0"


def test_validation_reports_emd_and_the_confidence_that_exposes_collapse(tiny_model_dir, template, tmp_path):
    config = tiny_config(tiny_model_dir, template, eval_n=2, eval_horizon=3, eval_prefix_lengths=[0],
                         eval_paths=4)
    trainer = SCTrainer(config=config, out=tmp_path)
    questions = trainer.validation_questions()
    result = trainer.validate(questions)
    assert set(result) == {"val_emd_l1", "val_confidence"} and result["val_emd_l1"] >= 0
    thetas = [QuestionRunner(trainer.current_lm(), q, template).paths(1).dist.probs[0] for q in questions]
    assert result["val_confidence"] == pytest.approx(float(torch.stack(thetas).max(-1).values.mean()), abs=1e-5)


# ---------------------------------------------------------------------------------------- CLI, resume

CLI_SETTINGS = ["--dataset", "demo", "-n", "1", "--prefix-lengths", "0", "--paths", "4", "--micro-batch", "2",
                "--grad-accum", "2", "--epochs", "1", "--steps-per-group", "8", "--warmup-steps", "2",
                "--learning-rate", "1e-2", "--save-steps", "1", "--eval-n", "0"]


def train_command(out: Path, model_dir: Path, template: str) -> list[str]:
    return [sys.executable, "-m", "beliefdrift", "train", "--out", str(out), "--model", str(model_dir),
            "--template", template, *CLI_SETTINGS]


def cli_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_cli(command: list[str]) -> None:
    """Run a command to completion; on failure, show the end of its stderr."""
    result = subprocess.run(command, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir, template, tmp_path_factory) -> Path:
    """An uninterrupted CLI run (8 updates)."""
    out = tmp_path_factory.mktemp("reference")
    run_cli(train_command(out, tiny_model_dir, template))
    return out


def test_a_run_logs_every_update_and_keeps_its_last_two_checkpoints(reference_run):
    """8 updates, a checkpoint after each (--save-steps 1): the log has every step and the last two checkpoints stay.
    (A run killed and resumed ends with these same files byte for byte: test_faults.py's SIGKILL and SIGINT tests of
    train.)"""
    with open(reference_run / "log.csv", newline="") as log:
        assert [int(r["step"]) for r in csv.DictReader(log)] == list(range(1, 9))
    assert sorted(p.name for p in (reference_run / "checkpoints").iterdir()) == ["checkpoint-000007",
                                                                                 "checkpoint-000008"]
    adapter = load_file(reference_run / "adapter" / "adapter_model.safetensors")
    assert any(float(adapter[name].abs().sum()) > 0 for name in adapter if "lora_B" in name), "training moved it"


def test_saved_adapter_loads_with_peft_and_load_adapter(reference_run, tiny_model_dir, question, template):
    from peft import PeftModel

    from beliefdrift.backend.adapters import load_adapter
    from beliefdrift.engine.methods import parse_method, run_methods

    adapter = reference_run / "adapter"
    tuned = load_adapter(load_model(str(tiny_model_dir), dtype="float32"), adapter)
    peft_model = PeftModel.from_pretrained(load_model(str(tiny_model_dir), dtype="float32").model, str(adapter)).eval()
    base = load_model(str(tiny_model_dir), dtype="float32")
    tokens = ppr_tokens(base, question, template)
    ids = torch.tensor([tokens.prompt_ids])
    with torch.no_grad():
        tuned_logits = tuned.model(ids).logits[0, -1]
        torch.testing.assert_close(peft_model(ids).logits[0, -1], tuned_logits)
        assert (tuned_logits - base.model(ids).logits[0, -1]).abs().max() > 1e-4, "the adapter changes the model"
    result = run_methods(tuned, question, [parse_method("am-ppr")], paths=4, steps=4, seed=0, template=template)[0]
    assert result.probs.shape == (4,) and float(result.probs.sum()) == pytest.approx(1.0)


def test_resume_refuses_changed_settings(reference_run, tiny_model_dir, template, capsys):
    from beliefdrift.cli.main import main

    argv = [*train_command(reference_run, tiny_model_dir, template)[3:], "--learning-rate", "0.5"]  # no interpreter
    capsys.readouterr()
    assert main(argv) == 2 and "learning_rate: stored 0.01, requested 0.5" in capsys.readouterr().err


def test_presets_and_overrides():
    for preset in sorted((ROOT / "configs").glob("train-*.yaml")):
        assert isinstance(load_settings(TrainConfig, preset), TrainConfig)
    llama = load_settings(TrainConfig, ROOT / "configs" / "train-paper-llama.yaml")
    olmo = load_settings(TrainConfig, ROOT / "configs" / "train-paper-olmo.yaml")
    assert (llama.learning_rate, llama.n, llama.prefix_lengths, llama.steps_per_group) == (2e-6, 20, [0, 2, 4, 6, 8], 1)
    assert (olmo.learning_rate, olmo.n, olmo.prefix_lengths, olmo.steps_per_group) == (1e-4, 12, [0, 2], 4)
    for config in (llama, olmo):
        lora = (config.lora_r, config.lora_alpha, config.lora_dropout, config.target_modules)
        assert lora == (16, 8, 0.05, ["all-linear"]) and (config.beta, config.clip) == (0.01, 5)
    for name in ("train-paper-llama.yaml", "train-paper-olmo.yaml"):  # the two readings the paper leaves open
        preset = yaml.safe_load((ROOT / "configs" / name).read_text())
        assert (preset["max_grad_norm"], preset["predictive_scope"]) == (1.0, "update"), name
    assert (TrainConfig().max_grad_norm, TrainConfig().predictive_scope) == (1.0, "update")
    with pytest.raises(ValueError, match="predictive_scope: expected one of update, micro_batch"):
        load_settings(TrainConfig, None, {"predictive_scope": "batch"})
    config = load_settings(TrainConfig, None, {"learning_rate": "3e-4", "prefix_lengths": [0, 2],
                                               "max_grad_norm": None})
    assert config.learning_rate == 3e-4 and config.prefix_lengths == [0, 2] and config.max_grad_norm is None
    with pytest.raises(ValueError, match=r"unknown settings \['lr'\]"):
        load_settings(TrainConfig, None, {"lr": 1})
    with pytest.raises(ValueError, match="exceeds paths"):
        load_settings(TrainConfig, None, {"micro_batch": 16, "grad_accum": 4, "paths": 32})


# ---------------------------------------------------------------------------------------- two processes


@pytest.mark.multiprocess
def test_two_process_training_keeps_ranks_in_sync(tiny_model_dir, template, tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
               str(tmp_path), str(tiny_model_dir), template]
    run_cli(command)
    report = json.loads((tmp_path / "ranks.json").read_text())
    assert len(set(report["groups"])) == 2, "each process trains its own group"
    assert report["max_difference"] == 0.0, "gradients are all-reduced, so every rank holds the same adapter"
    assert report["moved"] > 0
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    with open(tmp_path / "log.csv", newline="") as log:
        assert [int(r["step"]) for r in csv.DictReader(log)] == [1, 2]


def _two_process_worker(out: Path, model_dir: Path, template: str) -> None:
    """Two updates per rank, one group each; then compare every rank's LoRA weights."""
    config = tiny_config(model_dir, template, n=2, prefix_lengths=[0], steps_per_group=2, paths=4,
                         micro_batch=2, grad_accum=2, save_steps=1)
    trainer = SCTrainer(config=config, out=out)
    trainer.train()
    lora = torch.cat([p.detach().flatten() for n, p in trainer.peft_model.named_parameters() if "lora_B" in n])
    gathered = trainer.accelerator.gather(lora[None])
    group = trainer.groups[trainer.updates[0].group].id
    groups = [None] * trainer.accelerator.num_processes
    torch.distributed.all_gather_object(groups, group)
    if trainer.is_main:
        report = {"groups": groups, "max_difference": float((gathered - gathered[0]).abs().max()),
                  "moved": float(lora.abs().sum())}
        (out / "ranks.json").write_text(json.dumps(report))
    leave_run(trainer.accelerator)  # as `beliefdrift train` does (gloo's teardown can deadlock otherwise)


if __name__ == "__main__":
    _two_process_worker(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])


def test_the_log_names_a_group_by_its_question_and_prefix() -> None:
    """Issue 48 §7: the training log named groups by their ids, a CSQA question's 32-digit hash and label indices."""
    assert group_title(group_id("075e483d21c29a511267ef62bedc0461", (1, 0))) == "question 075e483d21c2… after B A"
    assert group_title(group_id("demo-025", ())) == "question demo-025 after no answer"
