"""Many questions in one engine batch give, bit for bit, what each question gives alone (float32, CPU)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_model import FAMILIES, SKY_QUESTION, tiny_family_lm

from beliefdrift.engine.methods import parse_method, run_methods, run_methods_many

METHODS = [parse_method(name) for name in ("direct", "ppr", "ppr-seed1", "ppr-seed3")]


def questions():
    """Prompts of different lengths, and one question with another number of options (its own batch)."""
    longer = dataclasses.replace(SKY_QUESTION, id="q-sky-long",
                                 stem="On a clear summer day at noon, what color is the sky?")
    three = dataclasses.replace(SKY_QUESTION, id="q-three", choices=("green", "blue", "red"), labels=("A", "B", "C"))
    grass = dataclasses.replace(SKY_QUESTION, id="q-grass", stem="What color is fresh grass?", answer="A")
    return [SKY_QUESTION, longer, three, grass]


def test_batched_questions_are_bit_identical_to_one_at_a_time(tiny_lm, history_template):
    batched = run_methods_many(tiny_lm, questions(), METHODS, paths=4, steps=5, seed=7, template=history_template)
    for question, results in zip(questions(), batched, strict=True):
        alone = run_methods(tiny_lm, question, METHODS, paths=4, steps=5, seed=7, template=history_template)
        for got, expected in zip(results, alone, strict=True):
            assert torch.equal(got.probs, expected.probs), (question.id, got.method.name)
            if expected.trajectories is not None:
                assert torch.equal(got.trajectories.answers, expected.trajectories.answers)
                assert torch.equal(got.trajectories.thetas, expected.trajectories.thetas)
                assert torch.equal(got.trajectories.seeds, expected.trajectories.seeds)
    # The questions really differ, so a mix-up between them would show.
    assert not torch.equal(batched[0][1].trajectories.thetas, batched[1][1].trajectories.thetas)


def test_evaluate_batch_questions_stores_the_same_results(tiny_model_dir, tmp_path):
    from beliefdrift.cli.main import main
    from beliefdrift.runs.store import RunStore

    def stored(batch: int) -> dict:
        out = tmp_path / f"batch-{batch}"
        argv = ["evaluate", "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "5", "-J", "4", "-N", "3",
                "--methods", "direct", "ppr", "ppr-seed2", "--dtype", "float32", "--bootstrap", "10",
                "--batch-questions", str(batch), "--out", str(out)]
        assert main(argv) == 0
        with RunStore.open(out / "run.sqlite", read_only=True) as store:
            return {(r.question_id, r.method): r for r in store.rows()}

    one, three = stored(1), stored(3)
    assert one.keys() == three.keys() and len(one) == 15
    for key, row in one.items():
        other = three[key]
        assert row.probs.tobytes() == other.probs.tobytes(), key
        if row.answers is not None:
            assert row.answers.tobytes() == other.answers.tobytes() and row.thetas.tobytes() == other.thetas.tobytes()


# Families with layers the fused kernel serves: no soft-cap and no sliding window that reaches into the prompt (all of
# Llama's and OLMo-2's layers, the global layers of the others; Mistral's and Phi-3's windows cover every layer here,
# Gemma-2 soft-caps).
FUSED_FAMILIES = {"llama", "olmo2", "qwen2", "qwen3", "gemma3", "olmo3"}


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt-oss"])  # gpt-oss: a cache per path
def test_stacked_prompts_match_run_by_run_attention(family, history_template, monkeypatch):
    """Runs of equal size stacked into one product per layer (the GPU path) give the run-by-run θ up to rounding on
    every family, ragged prompts, seeds, padding, sliding windows and soft-capping included, with the scores written
    out and with the prompts' part by the fused kernel (local layers, in the same pass as global ones, write their
    scores)."""
    from beliefdrift.backend import shared_prefix
    from beliefdrift.engine.resampling import QuestionRunner, make_generator, sample_answers

    lm = tiny_family_lm(family)
    fused_calls = []
    kernel = shared_prefix._prompt_attention
    monkeypatch.setattr(shared_prefix, "_prompt_attention", lambda *a: fused_calls.append(1) or kernel(*a))

    def thetas(stack: bool, fused: bool = False) -> torch.Tensor:
        """θ of three questions batched, then of the first alone (a single run stacks too, on a GPU)."""
        runners = [QuestionRunner(lm, q, history_template) for q in questions() if len(q.labels) == 4]
        seeds = [torch.tensor([[1, 2], [0, 0], [3, 1]]), torch.tensor([[2], [1], [0]]), torch.empty(3, 0).long()]
        got = []
        for count in (3, 1):
            batch = runners[0].ppr_prompt.concat([r.paths(3, s) for r, s in zip(runners[:count], seeds, strict=False)])
            assert len(batch.cache.runs.runs) == count
            batch.cache.runs = dataclasses.replace(batch.cache.runs, stack=stack, fused=fused)
            assert batch.cache.runs.stackable == stack and (batch.cache.runs.key_bias(0) is not None) == fused
            got.append(sample_answers(batch, 4, make_generator(2))[1])
        return torch.cat(got)

    exact = thetas(False)
    torch.testing.assert_close(thetas(True), exact, atol=1e-5, rtol=0)
    assert not fused_calls
    torch.testing.assert_close(thetas(True, fused=True), exact, atol=1e-5, rtol=0)
    assert bool(fused_calls) == (family in FUSED_FAMILIES)
    assert (exact[:3] - exact[3:6]).abs().max() > 1e-3, "the questions' θ differ, so a mix-up would show"


def test_trajectory_quantities_many_is_bit_identical_to_one_at_a_time(tiny_lm, history_template):
    """drift/emd's per-unit quantities (marginal drift, c.i.d. check) with every unit's paths in one batch equal,
    with ==, those of each unit alone; the paths are those `run_methods` samples."""
    from beliefdrift.diagnostics.marginal import marginal_drift
    from beliefdrift.diagnostics.trajectory import trajectory_quantities_many
    from beliefdrift.engine.resampling import QuestionRunner

    methods = [parse_method("ppr"), parse_method("ppr-seed5")]
    runners = [QuestionRunner(tiny_lm, q, history_template) for q in questions()]
    units = [(runner, method) for runner in runners for method in methods]
    batched = trajectory_quantities_many(units, 4, 6, 11)
    assert len(batched) == len(units)
    for (runner, method), got in zip(units, batched, strict=True):
        alone = trajectory_quantities_many([(QuestionRunner(tiny_lm, runner.question, history_template), method)], 4, 6,
                                           11)[0]
        assert got.keys() == alone.keys()
        for key, value in alone.items():
            assert got[key] == value, (runner.question.id, method.name, key)
    # Another order and a partial set of units change nothing either.
    assert trajectory_quantities_many(units[::-1][:3], 4, 6, 11) == batched[::-1][:3]
    # The paths are run_methods' paths (same generators; there ppr-seed5 shares a batch with ppr, whose padded paths
    # round θ differently), and the units differ, so a mix-up would show.
    expected = run_methods(tiny_lm, runners[0].question, methods, paths=4, steps=6, seed=11, template=history_template)
    torch.testing.assert_close(torch.tensor(batched[1]["marginal_mean"], dtype=torch.float64),
                               marginal_drift(expected[1].trajectories).mean, atol=1e-5, rtol=0)
    assert batched[0]["marginal_mean"] != batched[2]["marginal_mean"] != batched[3]["marginal_mean"]
    assert len(batched[4]["cid_difference"]) == 3 and len(batched[0]["cid_difference"]) == 4


def test_trajectory_quantities_many_wants_one_model(tiny_lm, history_template):
    from beliefdrift.backend import TransformersModel
    from beliefdrift.diagnostics.trajectory import trajectory_quantities_many
    from beliefdrift.engine.resampling import QuestionRunner

    other = TransformersModel(model=tiny_lm.model, tokenizer=tiny_lm.tokenizer, name="other")
    runner = QuestionRunner(tiny_lm, SKY_QUESTION, history_template)
    assert trajectory_quantities_many([], 4, 6, 11) == []
    with pytest.raises(ValueError, match="same model"):
        trajectory_quantities_many([(runner, parse_method("ppr")),
                                    (QuestionRunner(other, SKY_QUESTION, history_template), parse_method("ppr"))],
                                   4, 6, 11)
    with pytest.raises(ValueError, match="separate calls"):
        trajectory_quantities_many([(runner, parse_method("ppr")), (runner, parse_method("am-ppr"))], 4, 6, 11)


@pytest.mark.parametrize("command", ["drift", "emd"])
def test_diagnostics_batch_questions_store_the_same_records(command, tiny_model_dir, tmp_path):
    """drift and emd with three questions per engine batch store, byte for byte, the records and summary of one
    question at a time (float32, CPU). J = 4: the CPU's matrix product rounds a row differently when it falls in
    an incomplete block of 4 rows (plain `F.linear` does this too), so a question's paths fill whole blocks."""
    from beliefdrift.cli.main import main
    from beliefdrift.runs.store import RunStore

    extra = {"drift": ["--plot-questions", "0"],
             "emd": ["-K", "3", "--prefix-lengths", "0", "1", "--burn-in", "2", "-k", "2", "--noise-floor-replicates",
                     "3"]}[command]

    def stored(batch: int) -> tuple[dict, str]:
        out = tmp_path / f"{command}-{batch}"
        argv = [command, "--model", str(tiny_model_dir), "--dataset", "demo", "-n", "4", "-J", "4", "-N", "4",
                "--dtype", "float32", "--batch-questions", str(batch), "--out", str(out), *extra]
        assert main(argv) == 0
        with RunStore.open(out / "run.sqlite", read_only=True) as store:
            records = {unit: store.records(*unit) for unit in store.record_units()}
        return records, (out / "summary.md").read_text()

    (one, one_summary), (three, three_summary) = stored(1), stored(3)
    assert len(one) == 8 and one.keys() == three.keys()
    for unit, record in one.items():
        assert record == three[unit], unit
    assert one_summary == three_summary
    first, second = (one[unit]["marginal_mean"] for unit in sorted(one)[:2])
    assert first != second, "the units differ, so a mix-up between them would show"


def test_a_fused_kernel_that_fails_its_check_is_not_used(monkeypatch, caplog):
    """Where the device's fused kernel raises or disagrees with an explicit softmax, stacked prompts write their
    scores out instead, and the user is told."""
    from beliefdrift.backend import shared_prefix

    check = shared_prefix.fused_attention_works.__wrapped__  # uncached
    cpu = torch.device("cpu")
    assert check(cpu, torch.float32, 16) and check(cpu, torch.bfloat16, 128)

    def fails(*args):
        raise RuntimeError("no kernel image is available\nmore")

    monkeypatch.setattr(shared_prefix, "_prompt_attention", fails)
    assert not check(cpu, torch.float32, 16)
    assert "no fused attention kernel on cpu for torch.float32 (no kernel image is available)" in caplog.text
    caplog.clear()
    monkeypatch.setattr(shared_prefix, "_prompt_attention", lambda q, *_: (q, q.new_zeros(q.shape[:-1])))
    assert not check(cpu, torch.float32, 16)
    assert "disagrees with an explicit softmax" in caplog.text


def test_each_device_of_a_device_map_gets_its_own_key_bias(caplog):
    """Stacked prompts whose layers sit on several devices (a device map) get the fused kernel's key bias on each
    layer's device, and the kernel is checked on each device: one where it fails (here `meta`) writes its scores out,
    the others still fuse."""
    from beliefdrift.backend.shared_prefix import PromptRuns, SharedPrefix

    def prompt(length: int) -> SharedPrefix:
        keys = tuple(torch.randn(1, 2, length, 16, device=device) for device in ("meta", "cpu", "meta", "cpu"))
        return SharedPrefix(keys, tuple(map(torch.zeros_like, keys)))

    runs = PromptRuns(((prompt(20), 2), (prompt(7), 2)), stack=True)
    assert [runs.key_bias(layer) is None for layer in range(4)] == [True, False, True, False]
    bias = runs.key_bias(1)
    assert bias.device.type == "cpu" and bias.shape == (2, 1, 1, 32) and runs.key_bias(3) is bias
    assert torch.equal(bias[:, 0, 0].isinf(), torch.arange(32) >= torch.tensor([[20], [7]]))
    assert "no fused attention kernel on meta" in caplog.text


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stacked_prompts_on_the_gpu_use_the_fused_kernel(dtype, history_template):
    """On CUDA the memory-efficient kernel passes its check for the head sizes of 7–8B models, and two questions
    batched (stacked, fused) give the θ of each alone on the CPU."""
    from beliefdrift.backend import TransformersModel, shared_prefix
    from beliefdrift.engine.resampling import QuestionRunner

    cuda = torch.device("cuda")
    assert all(shared_prefix.fused_attention_works(cuda, dtype, dim) for dim in (64, 128, 256))
    thetas = []
    for device in ("cpu", "cuda"):
        lm = tiny_family_lm("llama")
        lm = TransformersModel(lm.model.to(device, dtype), lm.tokenizer, lm.name)
        runners = [QuestionRunner(lm, q, history_template) for q in questions() if len(q.labels) == 4][:2]
        batch = runners[0].ppr_prompt.concat([r.paths(3, torch.tensor([[1], [0], [2]])) for r in runners])
        assert (batch.cache.runs.key_bias(0) is not None) == (device == "cuda")
        batch.advance(torch.tensor([1, 3, 2, 0, 0, 1], device=device))
        thetas.append(batch.dist.probs.float().cpu())
    torch.testing.assert_close(thetas[1], thetas[0], atol=1e-4 if dtype == torch.float32 else 3e-2, rtol=0)
