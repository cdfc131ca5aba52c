"""The switches between readings of the paper (docs/reading.md): both readings run, and they differ
where they should, checked against hand-written expectations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from beliefdrift.cli.main import build_parser
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.config.options import read_settings, settings_from
from beliefdrift.data import MCQuestion
from beliefdrift.diagnostics.emd import DISTANCES, QuestionEMD, aggregate_emd, kstep_drift
from beliefdrift.engine.resampling import QuestionRunner, direct_tokens, ppr_tokens
from beliefdrift.prompts import question_prompt

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

TWO_OPTIONS = MCQuestion(id="q-2", stem="Is ice cold?", choices=("yes", "no"), labels=("A", "B"), answer="A",
                         source="test")

DIRECT_HEAD = (
    "Below is a multiple choice question.\n"
    "Return only one letter among A, B which corresponds \n"
    "to your answer, without any spaces or newlines.\n"
    "Follow the below format: \n"
    '"Answer: [Write your answer choice letter here]"\n'
    "```\n"
    "Is ice cold?\nA. yes\nB. no"
)


def test_direct_prompt_bytes_for_each_template_ending():
    """`fence` closes the question's code fence; `paper` stops after the last option, as Appendix C shows."""
    assert question_prompt("direct", TWO_OPTIONS, ending="fence") == DIRECT_HEAD + "\n```\n"
    assert question_prompt("direct", TWO_OPTIONS, ending="paper") == DIRECT_HEAD
    assert question_prompt("direct", TWO_OPTIONS) == DIRECT_HEAD + "\n```\n"  # the default is unchanged


@pytest.mark.parametrize("template", ["ppr-llama", "ppr-olmo"])
def test_ppr_prompts_end_with_the_question_under_the_paper_ending(template):
    fence = question_prompt(template, TWO_OPTIONS)
    paper = question_prompt(template, TWO_OPTIONS, ending="paper")
    assert paper.endswith("```\nIs ice cold?\nA. yes\nB. no") and fence == paper + "\n```\n"


def test_paper_ending_needs_a_closing_fence_and_a_known_name(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("{question}\nAnswers:\n")
    assert question_prompt(str(path), TWO_OPTIONS) == "Is ice cold?\nA. yes\nB. no\nAnswers:\n"
    with pytest.raises(ValueError, match="end with"):
        question_prompt(str(path), TWO_OPTIONS, ending="paper")
    with pytest.raises(ValueError, match="unknown template ending"):
        question_prompt("direct", TWO_OPTIONS, ending="open")


def test_both_endings_run_and_change_the_model_input(tiny_lm, question, tmp_path):
    """On the tiny chat model: the paper ending drops exactly the bytes "\\n```\\n" before the end of the user turn,
    and θ_0 of the direct and PPR prompts moves."""
    path = tmp_path / "fenced.txt"
    path.write_text("Answer with {choice_str}.\n```\n{question}\n```\n")
    for tokens in (direct_tokens, lambda lm, q, ending: ppr_tokens(lm, q, str(path), ending=ending)):
        fence, paper = (tokens(tiny_lm, question, ending=ending) for ending in ("fence", "paper"))
        removed = list(fence.prompt_ids)
        start = next(i for i, (a, b) in enumerate(zip(fence.prompt_ids, paper.prompt_ids, strict=False)) if a != b)
        del removed[start:start + 5]  # the byte tokenizer: one token per byte of "\n```\n"
        assert tiny_lm.tokenizer.decode(fence.prompt_ids[start:start + 5]) == "\n```\n"
        assert removed == list(paper.prompt_ids)
    runners = {ending: QuestionRunner(tiny_lm, question, str(path), ending) for ending in ("fence", "paper")}
    for dist in ("direct", "ppr"):
        probs = [runner.direct.probs if dist == "direct" else runner.paths(1).dist.probs[0]
                 for runner in runners.values()]
        assert not torch.equal(*probs)


def test_template_ending_reaches_every_command_that_renders_the_prompts():
    args = build_parser().parse_args(["evaluate", "--template-ending", "paper"])
    assert settings_from(args, EvalConfig).template_ending == "paper"
    assert EvalConfig().template_ending == "fence"
    for command in ("demo", "drift", "emd"):
        assert build_parser().parse_args([command, "--template-ending", "paper"]).template_ending == "paper"


@pytest.mark.parametrize(("name", "ending"), [("paper.yaml", "paper"), ("cpu-default.yaml", "fence")])
def test_presets_name_their_template_ending(name, ending):
    """The paper preset renders the paper's prompt (Appendix D.4); the CPU preset closes the fence."""
    assert read_settings(CONFIGS / name, [EvalConfig])["template_ending"] == ending


def test_total_variation_is_half_the_l1_norm_on_a_hand_computed_pair():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.3, 0.5])
    # |0.3| + |0| + |−0.3| = 0.6; total variation = the largest event gap, p({A}) − q({A}) = 0.3
    assert float(DISTANCES["l1"](p, q)) == pytest.approx(0.6)
    assert float(DISTANCES["tv"](p, q)) == pytest.approx(0.3)


def test_emd_under_both_readings_of_l1():
    """One question, K = 3, one prefix: p^(1) = (1, 0), p^(2) = (0.5, 0.5), p^(3) = (0.25, 0.75).
    L1 drifts 1.0 and 1.5 (EMD‾ 1.25); total variation 0.5 and 0.75 (EMD‾ 0.625)."""
    kstep = torch.tensor([[[1.0, 0.0], [0.5, 0.5], [0.25, 0.75]]])
    assert kstep_drift(kstep, "l1").tolist() == [[1.0, 1.5]]
    assert kstep_drift(kstep, "tv").tolist() == [[0.5, 0.75]]
    burn = torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]])
    result = QuestionEMD((0,), [()], [[]], kstep, True, True, burn, burn.flip(-1))
    summary = result.summary()
    assert summary["emd_bar_l1"] == pytest.approx(1.25) and summary["emd_bar_tv"] == pytest.approx(0.625)
    assert summary["emd_k_b_l1"] == pytest.approx([2.0, 0.0]) and summary["emd_k_b_tv"] == pytest.approx([1.0, 0.0])
    assert aggregate_emd("m", [summary], "tv").emd_bar == pytest.approx(0.625)
    with pytest.raises(ValueError, match="without the tv distance"):
        aggregate_emd("m", [{"emd_bar_l1": 1.0, "emd_k_b_l1": [0.0]}], "tv")
    assert build_parser().parse_args(["emd", "--distance", "l1", "tv"]).distance == ["l1", "tv"]
